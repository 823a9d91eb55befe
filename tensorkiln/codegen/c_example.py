"""example.c and the Makefile of an exported model: the shortest C program that runs it.

`./example [IN0.bin ...]` reads each input's raw bytes (dense, C order, in its
dtype) from a file, or uses zeros where none is given, runs the model once and
writes output i to `output<i>.bin`; `make run ARGS="..."` builds and runs it
against the shared library, `make static` links the static one.
"""
from __future__ import annotations

from tensorkiln.codegen.c_api import LibraryApi
from tensorkiln.runtime.signature import numpy_dtypes


def _itemsizes(specs) -> str:
    return ", ".join(str(numpy_dtypes(s.dtype)[0].itemsize) for s in specs) or "1"


def example_source(api: LibraryApi) -> str:
    """example.c for the model `api` describes."""
    n = api.name
    return f"""\
/* example.c: run model {n} once from C (make run ARGS="in0.bin ...").
 * Inputs: raw C-order buffers in the dtypes of {n}.h, read from the files named on the command line
 * (zeros where none is given). Output i is written to output<i>.bin. */
#include <stdio.h>
#include <stdlib.h>
#include "{n}.h"

static const size_t input_itemsize[] = {{{_itemsizes(api.inputs)}}};
static const size_t output_itemsize[] = {{{_itemsizes(api.outputs)}}};

static size_t elements(const int64_t *shape, int rank)
{{
    size_t count = 1;
    for (int d = 0; d < rank; d++) count *= (size_t)shape[d];
    return count;
}}

int main(int argc, char **argv)
{{
    int n_in = {n}_num_inputs(), n_out = {n}_num_outputs();
    void *in[{max(len(api.inputs), 1)}], *out[{max(len(api.outputs), 1)}];
    {n}_model *model = {n}_create(0);
    if (model == NULL) {{
        fprintf(stderr, "%s\\n", {n}_last_error());
        return 1;
    }}
    for (int i = 0; i < n_in; i++) {{
        size_t bytes = elements({n}_input_shape(i), {n}_input_rank(i)) * input_itemsize[i];
        FILE *f = i + 1 < argc ? fopen(argv[i + 1], "rb") : NULL;
        in[i] = calloc(bytes + 1, 1);
        if (i + 1 < argc && (f == NULL || fread(in[i], 1, bytes, f) != bytes)) {{
            fprintf(stderr, "cannot read the %zu bytes of input %s from %s\\n", bytes, {n}_input_name(i), argv[i + 1]);
            return 1;
        }}
        if (f != NULL) fclose(f);
    }}
    for (int i = 0; i < n_out; i++)
        out[i] = malloc(elements({n}_output_shape(i), {n}_output_rank(i)) * output_itemsize[i] + 1);
    if ({n}_run(model, (const void *const *)in, out) != 0) {{
        fprintf(stderr, "%s\\n", {n}_last_error());
        return 1;
    }}
    for (int i = 0; i < n_out; i++) {{
        size_t bytes = elements({n}_output_shape(i), {n}_output_rank(i)) * output_itemsize[i];
        char path[32];
        FILE *f;
        snprintf(path, sizeof path, "output%d.bin", i);
        f = fopen(path, "wb");
        if (f == NULL || fwrite(out[i], 1, bytes, f) != bytes) {{
            fprintf(stderr, "cannot write %s\\n", path);
            return 1;
        }}
        fclose(f);
        printf("output %s: %zu bytes -> %s\\n", {n}_output_name(i), bytes, path);
        free(out[i]);
    }}
    for (int i = 0; i < n_in; i++) free(in[i]);
    {n}_destroy(model);
    return 0;
}}
"""


def makefile(api: LibraryApi, openmp: bool) -> str:
    """The Makefile that builds and runs example.c (`make run`), against libNAME.so or libNAME.a."""
    n = api.name
    runtime = "-fopenmp " if openmp else ""
    return f"""\
# Build and run the example of model {n}: make run [ARGS="in0.bin ..."]
CC ?= cc
CFLAGS ?= -O2

example: example.c {n}.h lib{n}.so
\t$(CC) $(CFLAGS) -o $@ example.c -L. -l{n} -Wl,-rpath,'$$ORIGIN'

# The same program with the model linked in statically.
example_static: example.c {n}.h lib{n}.a
\t$(CC) $(CFLAGS) -o $@ example.c lib{n}.a {runtime}-lm

run: example
\t./example $(ARGS)

static: example_static
\t./example_static $(ARGS)

clean:
\trm -f example example_static output*.bin

.PHONY: run static clean
"""


__all__ = ["example_source", "makefile"]
