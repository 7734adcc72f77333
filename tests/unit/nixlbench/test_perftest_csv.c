/*
 * test_perftest_csv.c - nixlbench's reader of ucx_perftest's "-f -v"
 * output (tools/nixlbench/bench_ucx.c): real UCX 1.13.1 output (saved from
 * a run on the CI box), every truncation of it, a missing column, columns
 * moved, garbage, zero and negative rates.
 *
 * Every input is copied into a buffer of exactly its length plus the NUL,
 * so a read past the end is ASan's to report in the sanitizer build.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/test_check.h"
#include "bench_ucx.h"

/* bench_ucx.c's failure and clock helpers live in nixlbench.c; the reader
 * needs neither. */
void bench_die(const char *fmt, ...)
{
    (void)fmt;
    abort();
}

uint64_t bench_now_ns(void)
{
    return 0;
}

static int rd(const char *text, size_t len, double *bps)
{
    char *copy = malloc(len + 1);
    if (!copy)
        abort();
    memcpy(copy, text, len);
    copy[len] = '\0';
    *bps = -1;
    int rc = bench_ucx_parse_csv(copy, bps);
    free(copy);
    return rc;
}

/* UCX 1.13.1's ucx_perftest 127.0.0.1 -t ucp_put_bw -s 1048576 -n 200 -w 20 -O 8 -f -v */
static const char real[] =
    "+----------------------------------------------------------------------------------------------------------+\n"
    "| API:          protocol layer                                                                             |\n"
    "| Test:         put bandwidth                                                                              |\n"
    "| Message size: 1048576                                                                                    |\n"
    "+----------------------------------------------------------------------------------------------------------+\n"
    "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n"
    " 200,0.112,2097.360,2097.360,476.79,476.79,477,477\n";

int main(void)
{
    double bps;
    CHECK(rd(real, strlen(real), &bps) == 0);
    CHECK(bps > 476.78 * 1048576.0 && bps < 476.80 * 1048576.0);

    /* Every truncation: either no number (-1) or, once the rate's digits
     * began, a rate no larger than the whole one. */
    size_t num_at = strstr(real, "476.79,477") - real;
    for (size_t len = 0; len < strlen(real); len++) {
        int rc = rd(real, len, &bps);
        if (len <= num_at)
            CHECK(rc == -1);
        else
            CHECK(rc == -1 || (bps > 0 && bps <= 476.80 * 1048576.0));
    }

    /* The column is found by its name, wherever it is. */
    static const char moved[] = "iterations,overall_bw,avg_bw\n100,1024.5,3\n";
    CHECK(rd(moved, strlen(moved), &bps) == 0 && bps == 1024.5 * 1048576.0);
    /* Without an overall_bw column, no rate; nor with a prefix of its name. */
    static const char nocol[] = "iterations,avg_bw\n100,3.0\n";
    CHECK(rd(nocol, strlen(nocol), &bps) == -1);
    static const char prefix[] = "iterations,overall_b\n100,3.0\n";
    CHECK(rd(prefix, strlen(prefix), &bps) == -1);
    static const char longer[] = "iterations,overall_bwx\n100,3.0\n";
    CHECK(rd(longer, strlen(longer), &bps) == -1);
    /* Fewer numbers than columns, a zero, a negative, a word, trailing junk. */
    static const char *const bad[] = {
        "iterations,a,overall_bw\n100,2\n",
        "iterations,overall_bw\n100,0\n",
        "iterations,overall_bw\n100,-5.5\n",
        "iterations,overall_bw\n100,fast\n",
        "iterations,overall_bw\n100,12.5x\n",
        "iterations,overall_bw\n100,nan\n",
        "iterations,overall_bw\n100,inf\n",
        "iterations,overall_bw",
        "",
        "no perftest here\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(rd(bad[i], strlen(bad[i]), &bps) == -1);
    /* CRLF line ends and a last line without its newline are read. */
    static const char crlf[] = "iterations,overall_bw\r\n100,7.25\r\n";
    CHECK(rd(crlf, strlen(crlf), &bps) == 0 && bps == 7.25 * 1048576.0);
    static const char nonl[] = "iterations,overall_bw\n100,7.25";
    CHECK(rd(nonl, strlen(nonl), &bps) == 0 && bps == 7.25 * 1048576.0);
    if (failures)
        fprintf(stderr, "%d checks failed\n", failures);
    else
        printf("perftest reader: all checks passed\n");
    return failures ? 1 : 0;
}
