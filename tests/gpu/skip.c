/*
 * skip.c - stands in for the GPU tests in builds without CUDA's headers:
 * prints why and exits 77 (Meson's skip), so the skip is visible.
 */
#include <stdio.h>

int main(int argc, char **argv)
{
    printf("SKIP %s: built without CUDA headers (cuda.h not found in -Dgpu_include_dir)\n",
           argc > 1 ? argv[1] : "gpu test");
    return 77;
}
