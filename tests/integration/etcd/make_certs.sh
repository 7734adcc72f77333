#!/bin/sh
# make_certs.sh DIR - the certificates of an etcd-over-TLS test, made with the
# openssl command (P-256 keys, valid for two days):
#   ca.pem                          the CA that signs the two below
#   server.pem, server.key          etcd's: CN etcd-test-server, SAN IP 127.0.0.1 and localhost,
#                                   for serverAuth and clientAuth
#   client.pem, client.key          a client's (O=nixl-test-client, no CN), for --client-cert-auth
#   other-ca.pem                    an unrelated CA: trusting it instead is "the wrong CA"
# Keys are mode 600.  Exits 77 with a SKIP line when openssl is missing.
set -eu
dir=$1
if ! command -v openssl >/dev/null 2>&1; then
    echo "SKIP: the openssl command is not in PATH (Debian package openssl)"
    exit 77
fi
mkdir -p "$dir"
cd "$dir"
umask 077
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 2 -sha256 \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        -out "$1.pem"
}
# leaf NAME CN EXTENSIONS: a key and a certificate signed by ca.pem (CN empty: O=nixl-test-NAME).
leaf() {
    key "$1.key"
    if [ -n "$2" ]; then subj="/CN=$2"; else subj="/O=nixl-test-$1"; fi
    openssl req -new -key "$1.key" -subj "$subj" -out "$1.csr"
    printf '%s\n' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -sha256 \
        -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}
ca ca nixl-test-ca
ca other-ca nixl-test-other-ca
# clientAuth too: etcd 3.4's HTTP gateway presents the server's certificate to
# etcd's own gRPC port, which --client-cert-auth checks like any client's.
leaf server etcd-test-server "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
# No CN: with auth enabled, etcd 3.4's HTTP gateway refuses a client certificate
# that has one (HTTP 400 "CommonName of client sending a request against gateway
# will be ignored and not used as expected").
leaf client "" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
chmod 644 ./*.pem
