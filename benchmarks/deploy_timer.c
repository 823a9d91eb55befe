/* deploy_timer.c: times an exported model from C, for benchmarks/deploy.py.
 *
 *   cc -O2 -DMODEL=resnet18 -include resnet18.h deploy_timer.c -L. -lresnet18 -o timer
 *   ./timer CALLS IN0.bin ...
 *
 * Prints "create_seconds S" (MODEL_create) and "call_seconds S1 S2 ..." (CALLS runs after one
 * untimed run), and writes output i of the last run to output<i>.bin for a bitwise comparison. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define PASTE(a, b) a##_##b
#define NAMED(a, b) PASTE(a, b)
#define API(fn) NAMED(MODEL, fn)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t file_bytes(FILE *f)
{
    long size;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    return (size_t)size;
}

int main(int argc, char **argv)
{
    int calls = argc > 1 ? atoi(argv[1]) : 10;
    int n_in = API(num_inputs)(), n_out = API(num_outputs)();
    void *in[64], *out[64];
    size_t out_bytes[64];
    double start = now();
    API(model) *model = API(create)(0);
    double created = now();
    if (model == NULL || argc < 2 + n_in || n_in > 64 || n_out > 64) {
        fprintf(stderr, "%s\n", model == NULL ? API(last_error)() : "usage: timer CALLS IN0.bin ...");
        return 1;
    }
    for (int i = 0; i < n_in; i++) {
        FILE *f = fopen(argv[2 + i], "rb");
        size_t bytes = f ? file_bytes(f) : 0;
        in[i] = malloc(bytes + 1);
        if (f == NULL || fread(in[i], 1, bytes, f) != bytes) return 1;
        fclose(f);
    }
    for (int i = 0; i < n_out; i++) {
        /* the output's element size is not in the API: 8 bytes covers every dtype */
        size_t count = 1;
        for (int d = 0; d < API(output_rank)(i); d++) count *= (size_t)API(output_shape)(i)[d];
        out_bytes[i] = count;
        out[i] = malloc(count * 8 + 1);
    }
    printf("create_seconds %.9f\ncall_seconds", created - start);
    for (int k = 0; k <= calls; k++) {
        double t0 = now();
        if (API(run)(model, (const void *const *)in, out) != 0) {
            fprintf(stderr, "%s\n", API(last_error)());
            return 1;
        }
        if (k > 0) printf(" %.9f", now() - t0);
    }
    printf("\n");
    for (int i = 0; i < n_out; i++) {
        char path[32];
        FILE *f;
        snprintf(path, sizeof path, "output%d.bin", i);
        f = fopen(path, "wb");
        fwrite(out[i], 1, out_bytes[i] * 8, f);  /* the caller keeps the output's own bytes */
        fclose(f);
    }
    API(destroy)(model);
    return 0;
}
