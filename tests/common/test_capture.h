/*
 * test_capture.h - what the library logs meanwhile: stderr to an unlinked
 * file between capture_begin() and capture_end(), which returns the text
 * (NUL-terminated, at most 16 KiB) and writes it to stderr again so the
 * test's log still shows it.  Include after test_check.h.
 */
#ifndef NIXL_TEST_CAPTURE_H
#define NIXL_TEST_CAPTURE_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static struct {
    int saved_fd, file_fd;
    char text[16384];
} test_cap;

static void capture_begin(void)
{
    char path[] = "/var/tmp/nixl-test-log-XXXXXX";
    int tmp = mkstemp(path);
    CHECK(tmp >= 0);
    unlink(path);
    /* Both kept at 100 or above, so a low number a test closed on purpose
     * (a registered file's) is not taken meanwhile. */
    int fd = fcntl(tmp, F_DUPFD, 100);
    close(tmp);
    fflush(stderr);
    test_cap.saved_fd = fcntl(STDERR_FILENO, F_DUPFD, 100);
    dup2(fd, STDERR_FILENO);
    test_cap.file_fd = fd;
}

static const char *capture_end(void)
{
    fflush(stderr);
    dup2(test_cap.saved_fd, STDERR_FILENO);
    close(test_cap.saved_fd);
    ssize_t n = pread(test_cap.file_fd, test_cap.text, sizeof(test_cap.text) - 1, 0);
    test_cap.text[n > 0 ? n : 0] = '\0';
    close(test_cap.file_fd);
    fputs(test_cap.text, stderr);
    return test_cap.text;
}

#endif
