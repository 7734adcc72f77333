/*
 * nixl-info - what this libnixl offers: its version, the backends it finds
 * (built in or modules) with their memory types, capabilities and
 * parameters, the table of NIXL_* variables, and (-d NAME) what one backend
 * says of itself once an agent created it: the libfabric rails with the GPU
 * -> NIC map (-t), the UCX version and memory types of ucx.
 *
 * Uses only the public API.  `nixl-info -c --markdown` prints the exact
 * fragment docs/env.md embeds, so a test can diff the two.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "nixl.h"

static const char *const mem_names[NIXL_MEM_TYPE_COUNT] = {"DRAM", "VRAM", "BLOCK", "OBJ", "FILE"};

static const struct {
    uint32_t bit;
    const char *name;
} cap_names[] = {
    {NIXL_CAP_LOCAL, "LOCAL"},   {NIXL_CAP_SAME_HOST, "SAME_HOST"}, {NIXL_CAP_CROSS_HOST, "CROSS_HOST"},
    {NIXL_CAP_NOTIF, "NOTIF"},   {NIXL_CAP_PROGRESS, "PROGRESS"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: nixl-info [-c [--markdown] | -d NAME | -t] [-h]\n"
               "  (no option)      version and every available backend\n"
               "  -c, --config     every NIXL_* variable: name, current value, default, description\n"
               "      --markdown   with -c: the same as a markdown table (as in docs/env.md)\n"
               "  -d, --describe NAME\n"
               "                   backend NAME as an agent creates it (its NIXL_<NAME>_* variables apply),\n"
               "                   in its own words (nixl_backend_describe); ucx: UCX version, CUDA memory\n"
               "  -t, --topology   -d libfabric: provider, rails (domain, PCI address, NUMA node) and, for\n"
               "                   each GPU (PCI bus id, CUDA ordinal), the rails its memory is registered on\n"
               "  -h, --help       this text\n");
}

static const char *or_dash(const char *s)
{
    return s != NULL && *s != '\0' ? s : "-";
}

static void print_mem_types(uint32_t mask)
{
    const char *sep = "";

    for (int t = 0; t < NIXL_MEM_TYPE_COUNT; t++) {
        if (mask & NIXL_MEM_BIT(t)) {
            printf("%s%s", sep, mem_names[t]);
            sep = " ";
        }
    }
    uint32_t rest = mask & ~((1u << NIXL_MEM_TYPE_COUNT) - 1);
    if (rest != 0)
        printf("%s0x%x", sep, rest);
    else if (*sep == '\0')
        printf("none");
    printf("\n");
}

static void print_caps(uint32_t caps)
{
    const char *sep = "";
    uint32_t known = 0;

    for (size_t i = 0; i < sizeof(cap_names) / sizeof(cap_names[0]); i++) {
        known |= cap_names[i].bit;
        if (caps & cap_names[i].bit) {
            printf("%s%s", sep, cap_names[i].name);
            sep = " ";
        }
    }
    if (caps & ~known)
        printf("%s0x%x", sep, caps & ~known);
    else if (*sep == '\0')
        printf("none");
    printf("\n");
}

static void print_backend(const nixl_backend_info_t *b)
{
    printf("\nbackend %s\n", or_dash(b->name));
    printf("  description  %s\n", or_dash(b->description));
    printf("  origin       %s\n", or_dash(b->origin));
    printf("  memory       ");
    print_mem_types(b->mem_types);
    printf("  caps         ");
    print_caps(b->caps);
    if (b->num_params == 0) {
        printf("  params       none\n");
        return;
    }

    int kw = 0, dw = 0;
    for (size_t i = 0; i < b->num_params; i++) {
        int k = (int)strlen(or_dash(b->params[i].key));
        int d = (int)strlen(b->params[i].default_value ? b->params[i].default_value : "") + 2;
        kw = k > kw ? k : kw;
        dw = d > dw ? d : dw;
    }
    printf("  params\n");
    for (size_t i = 0; i < b->num_params; i++) {
        const nixl_param_info_t *p = &b->params[i];
        char def[256];
        snprintf(def, sizeof(def), "\"%s\"", p->default_value ? p->default_value : "");
        printf("    %-*s  %-*s  %s\n", kw, or_dash(p->key), dw, def, p->doc ? p->doc : "");
    }
}

static int show_backends(void)
{
    const nixl_backend_info_t *infos;
    size_t n;
    nixl_status_t st;

    printf("nixl %s\n", nixl_version());
    st = nixl_backends_available(&infos, &n);
    if (st != NIXL_OK) {
        fprintf(stderr, "nixl-info: cannot list backends: %s (%s)\n", nixl_strerror(st), nixl_status_name(st));
        return 1;
    }
    printf("%zu backend%s available\n", n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++)
        print_backend(&infos[i]);
    return 0;
}

/* ---- configuration table --------------------------------------------- */

/* Does name spell NIXL_<BACKEND>_<KEY>, case aside? */
static int row_is_param(const char *name, const char *backend, const char *key)
{
    size_t bl = strlen(backend), kl = strlen(key);

    return strncasecmp(name, "NIXL_", 5) == 0 && strncasecmp(name + 5, backend, bl) == 0 && name[5 + bl] == '_' &&
           strncasecmp(name + 6 + bl, key, kl) == 0 && name[6 + bl + kl] == '\0';
}

/* Index of the backend whose parameter this row is, or -1 for core rows. */
static long row_backend(const char *name, const nixl_backend_info_t *infos, size_t n)
{
    for (size_t b = 0; b < n; b++) {
        if (infos[b].name == NULL)
            continue;
        for (size_t p = 0; p < infos[b].num_params; p++)
            if (infos[b].params[p].key != NULL && row_is_param(name, infos[b].name, infos[b].params[p].key))
                return (long)b;
    }
    return -1;
}

static void md_cell(const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '|')
            fputs("\\|", stdout);
        else if (*s == '\n')
            putchar(' ');
        else
            putchar(*s);
    }
}

static void md_row(const nixl_config_info_t *c)
{
    printf("| `");
    md_cell(c->name);
    printf("` | ");
    if (c->default_value != NULL && *c->default_value != '\0') {
        printf("`");
        md_cell(c->default_value);
        printf("`");
    } else {
        printf("(empty)");
    }
    printf(" | ");
    md_cell(c->doc ? c->doc : "");
    printf(" |\n");
}

static void md_table_head(void)
{
    printf("| Variable | Default | Description |\n");
    printf("|---|---|---|\n");
}

/* Core rows first, then one section per backend whose parameters have rows. */
static void show_config_markdown(const nixl_config_info_t *rows, size_t count, const long *owner,
                                 const nixl_backend_info_t *infos, size_t n)
{
    printf("### Core\n\n");
    md_table_head();
    for (size_t i = 0; i < count; i++)
        if (owner[i] < 0)
            md_row(&rows[i]);

    for (size_t b = 0; b < n; b++) {
        int any = 0;
        for (size_t i = 0; i < count; i++) {
            if (owner[i] != (long)b)
                continue;
            if (!any) {
                printf("\n### Backend `%s`\n\n", infos[b].name);
                md_table_head();
                any = 1;
            }
            md_row(&rows[i]);
        }
    }
}

static const char *text_value(const char *s)
{
    return s != NULL && *s != '\0' ? s : "\"\"";
}

static void show_config_text(const nixl_config_info_t *rows, size_t count)
{
    int nw = 4, vw = 5, dw = 7; /* the header words */

    for (size_t i = 0; i < count; i++) {
        int l;
        if ((l = (int)strlen(rows[i].name)) > nw)
            nw = l;
        if ((l = (int)strlen(text_value(rows[i].value))) > vw)
            vw = l;
        if ((l = (int)strlen(text_value(rows[i].default_value))) > dw)
            dw = l;
    }
    printf("%-*s  %-*s  %-*s  %s\n", nw, "NAME", vw, "VALUE", dw, "DEFAULT", "DESCRIPTION");
    for (size_t i = 0; i < count; i++)
        printf("%-*s  %-*s  %-*s  %s\n", nw, rows[i].name, vw, text_value(rows[i].value), dw,
               text_value(rows[i].default_value), rows[i].doc ? rows[i].doc : "");
}

static int show_config(int markdown)
{
    const nixl_backend_info_t *infos = NULL;
    size_t n = 0;
    nixl_status_t st = nixl_backends_available(&infos, &n);

    if (st != NIXL_OK) {
        /* The table is still worth printing; rows just cannot be grouped. */
        fprintf(stderr, "nixl-info: cannot list backends: %s\n", nixl_strerror(st));
        infos = NULL;
        n = 0;
    }

    size_t count = nixl_config_count();
    nixl_config_info_t *rows = calloc(count + 1, sizeof(*rows));
    long *owner = calloc(count + 1, sizeof(*owner));
    int rc = 1;
    if (rows == NULL || owner == NULL) {
        fprintf(stderr, "nixl-info: out of memory\n");
        goto out_free;
    }
    for (size_t i = 0; i < count; i++) {
        st = nixl_config_get(i, &rows[i]);
        if (st != NIXL_OK || rows[i].name == NULL) {
            fprintf(stderr, "nixl-info: cannot read configuration row %zu: %s\n", i, nixl_strerror(st));
            goto out_free;
        }
        owner[i] = row_backend(rows[i].name, infos, n);
    }

    if (markdown)
        show_config_markdown(rows, count, owner, infos, n);
    else
        show_config_text(rows, count);
    rc = 0;
out_free:
    free(owner);
    free(rows);
    return rc;
}

/* ---- one backend (-d NAME, -t) ------------------------------------------ */

static int describe_backend(const char *be_name)
{
    char name[64];
    snprintf(name, sizeof(name), "nixl-info-%d", (int)getpid());
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_agent_t *agent = NULL;
    nixl_backend_t *b = NULL;
    char *buf = NULL;
    size_t len = 0;
    int rc = 1;

    nixl_status_t st = nixl_agent_create(&cfg, &agent);
    if (st != NIXL_OK) {
        fprintf(stderr, "nixl-info: cannot create an agent: %s\n", nixl_strerror(st));
        return 1;
    }
    st = nixl_backend_create(agent, be_name, NULL, 0, &b);
    if (st == NIXL_ERR_UNKNOWN_BACKEND) {
        fprintf(stderr, "nixl-info: this libnixl has no %s backend (built in or a module of NIXL_PLUGIN_DIR)\n",
                be_name);
        goto out;
    }
    if (st != NIXL_OK) {
        fprintf(stderr, "nixl-info: the %s backend could not be created: %s (NIXL_LOG_LEVEL=info says more)\n",
                be_name, nixl_strerror(st));
        goto out;
    }
    st = nixl_backend_describe(b, NULL, &len);
    if (st == NIXL_OK) {
        buf = malloc(len);
        st = buf != NULL ? nixl_backend_describe(b, buf, &len) : NIXL_ERR_NO_MEMORY;
    }
    if (st != NIXL_OK) {
        fprintf(stderr, "nixl-info: cannot describe the %s backend: %s\n", be_name, nixl_strerror(st));
        goto out;
    }
    fputs(buf, stdout);
    rc = 0;
out:
    free(buf);
    nixl_agent_destroy(agent);
    return rc;
}

int main(int argc, char **argv)
{
    int config = 0, markdown = 0;
    const char *describe = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
            config = 1;
        } else if (strcmp(a, "--markdown") == 0) {
            markdown = 1;
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--topology") == 0) {
            describe = "libfabric";
        } else if (strcmp(a, "-d") == 0 || strcmp(a, "--describe") == 0) {
            if (i + 1 >= argc || !*argv[i + 1]) {
                fprintf(stderr, "nixl-info: %s needs a backend name\n", a);
                usage(stderr);
                return 2;
            }
            describe = argv[++i];
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "nixl-info: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (markdown && !config) {
        fprintf(stderr, "nixl-info: --markdown goes with -c\n");
        usage(stderr);
        return 2;
    }

    if (describe && config) {
        fprintf(stderr, "nixl-info: -d/-t and -c go separately\n");
        usage(stderr);
        return 2;
    }

    int rc = describe ? describe_backend(describe) : config ? show_config(markdown) : show_backends();
    if (fflush(stdout) != 0) {
        perror("nixl-info: stdout");
        return 1;
    }
    return rc;
}
