/*
 * _tk_fastcall: the warm call of a compiled program, in C.
 *
 * A Caller is bound to one loaded program whose inputs are plain (no index to
 * check, no output written into an input): its entry's address, its inputs'
 * dtypes and shapes, its outputs' dtypes and shapes, its constants' and
 * arena's addresses, and the module's lock. caller(args) does what the Python
 * path does for a call whose arguments are exactly as checked before:
 *
 *   1. each argument is a C-contiguous ndarray (or an eager tk.Tensor holding
 *      one, not requiring grad) of its input's dtype (by identity) and shape;
 *      anything else returns None and the caller takes the Python path, which
 *      converts, or raises an error naming the argument;
 *   2. each output is the array of the last call when nothing else holds it
 *      (reference count 1: only this Caller), else a new one;
 *   3. the module's lock is taken without blocking (None if another thread
 *      holds it: the Python path waits for it), the GIL is released around
 *      the one call of the entry, and a failed status is raised by the
 *      module's own `raise_failure(status)`.
 *
 * A program that baked parameters in as constants, or assumed which tensors
 * had a .grad, is valid only while that holds: `set_checks(baked, guards,
 * writes)` makes each call first check, in C, that every baked tensor still
 * holds its array (`tensor._value is array`) with its count of in-place
 * writes (`writes.get(id(array), 0)`), and every guarded tensor still has (or
 * has no) .grad; if not, None (the Python path traces again).
 *
 * A program with size symbols gets one Caller per set of input shapes: its
 * sizes array is passed as one more constant (the entry reads it after the
 * constants), and its arena grows when a call needs more, so such a Caller is
 * given `arena_cell`, the ctypes pointer the module updates in place, and
 * reads the arena's address from it under the lock at every call.
 *
 * It returns the output arrays as a tuple. `invalidate()` makes every later
 * call return None: a released module's library is unloaded, so its entry
 * must never be called again.
 */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <numpy/arrayobject.h>

typedef int (*entry_fn)(void *const *args, void *arena);

typedef struct {
    PyObject_HEAD
    entry_fn entry;             /* NULL once invalidated */
    void *arena;
    void **arena_cell;          /* where to read the arena's address at each call, or NULL: `arena` */
    Py_ssize_t n_inputs, n_outputs;
    PyArray_Descr **in_descr;   /* borrowed through `keep` */
    int *in_ndim;
    npy_intp **in_dims;
    PyArray_Descr **out_descr;
    int *out_ndim;
    npy_intp **out_dims;
    PyObject **recycled;        /* last call's outputs (owned), or NULL */
    void **pointers;            /* inputs, outputs, constants */
    PyObject *lock_acquire;     /* bound lock.acquire */
    PyObject *lock_release;     /* bound lock.release */
    PyObject *raise_failure;    /* callable(status): raises the module's error */
    PyObject *tensor_type;      /* tk.Tensor, whose eager instances are unwrapped */
    PyObject *keep;             /* the construction arguments, kept alive */
    PyObject *baked;            /* ((tensor, array, id(array), writes), ...) or NULL */
    PyObject *guards;           /* ((tensor, had_grad), ...) or NULL */
    PyObject *writes;           /* id(array) -> in-place writes (frontend/writes.py) */
} Caller;

static PyObject *str_value, *str_node, *str_requires_grad, *str_grad;

static void caller_free_arrays(Caller *self)
{
    if (self->recycled) {
        for (Py_ssize_t k = 0; k < self->n_outputs; k++)
            Py_XDECREF(self->recycled[k]);
    }
    PyMem_Free(self->recycled);
    PyMem_Free(self->pointers);
    PyMem_Free(self->in_descr);
    PyMem_Free(self->in_ndim);
    PyMem_Free(self->out_descr);
    PyMem_Free(self->out_ndim);
    if (self->in_dims)
        for (Py_ssize_t i = 0; i < self->n_inputs; i++)
            PyMem_Free(self->in_dims[i]);
    if (self->out_dims)
        for (Py_ssize_t k = 0; k < self->n_outputs; k++)
            PyMem_Free(self->out_dims[k]);
    PyMem_Free(self->in_dims);
    PyMem_Free(self->out_dims);
}

static void caller_dealloc(Caller *self)
{
    caller_free_arrays(self);
    Py_XDECREF(self->lock_acquire);
    Py_XDECREF(self->lock_release);
    Py_XDECREF(self->raise_failure);
    Py_XDECREF(self->tensor_type);
    Py_XDECREF(self->keep);
    Py_XDECREF(self->baked);
    Py_XDECREF(self->guards);
    Py_XDECREF(self->writes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* dims of a shape tuple into a fresh array; -1 on a bad shape */
static int read_shape(PyObject *shape, int *ndim, npy_intp **dims)
{
    if (!PyTuple_Check(shape)) {
        PyErr_SetString(PyExc_TypeError, "a shape must be a tuple of ints");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(shape);
    *ndim = (int)n;
    *dims = PyMem_Malloc(sizeof(npy_intp) * (n ? n : 1));
    if (!*dims) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t d = 0; d < n; d++) {
        (*dims)[d] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
        if ((*dims)[d] < 0)
            return -1;
    }
    return 0;
}

/* Caller(entry, arena, in_dtypes, in_shapes, out_dtypes, out_shapes, constants, lock, raise_failure, tensor_type
          [, arena_cell_address, arena_cell]): with the last two, the arena's address is read at each call
   from the pointer at arena_cell_address (arena_cell, the ctypes object holding it, is kept alive) */
static int caller_init(Caller *self, PyObject *args, PyObject *kwds)
{
    unsigned long long entry, arena, arena_cell = 0;
    PyObject *in_dtypes, *in_shapes, *out_dtypes, *out_shapes, *constants, *lock, *raise_failure, *tensor_type;
    PyObject *cell_owner = NULL;
    if (!PyArg_ParseTuple(args, "KKO!O!O!O!OOOO|KO", &entry, &arena, &PyTuple_Type, &in_dtypes, &PyTuple_Type,
                          &in_shapes, &PyTuple_Type, &out_dtypes, &PyTuple_Type, &out_shapes, &constants, &lock,
                          &raise_failure, &tensor_type, &arena_cell, &cell_owner))
        return -1;
    if (arena_cell && !cell_owner) {
        PyErr_SetString(PyExc_ValueError, "Caller: an arena cell needs the object that holds it");
        return -1;
    }
    if (!PyTuple_Check(constants) || PyTuple_GET_SIZE(in_dtypes) != PyTuple_GET_SIZE(in_shapes) ||
        PyTuple_GET_SIZE(out_dtypes) != PyTuple_GET_SIZE(out_shapes) || !entry) {
        PyErr_SetString(PyExc_ValueError, "Caller: inconsistent program description");
        return -1;
    }
    caller_free_arrays(self);
    self->entry = (entry_fn)(uintptr_t)entry;
    self->arena = (void *)(uintptr_t)arena;
    self->arena_cell = (void **)(uintptr_t)arena_cell;
    self->n_inputs = PyTuple_GET_SIZE(in_dtypes);
    self->n_outputs = PyTuple_GET_SIZE(out_dtypes);
    Py_ssize_t n_constants = PyTuple_GET_SIZE(constants);
    Py_ssize_t n_in = self->n_inputs, n_out = self->n_outputs;
    self->in_descr = PyMem_Calloc(n_in + 1, sizeof(PyArray_Descr *));
    self->in_ndim = PyMem_Calloc(n_in + 1, sizeof(int));
    self->in_dims = PyMem_Calloc(n_in + 1, sizeof(npy_intp *));
    self->out_descr = PyMem_Calloc(n_out + 1, sizeof(PyArray_Descr *));
    self->out_ndim = PyMem_Calloc(n_out + 1, sizeof(int));
    self->out_dims = PyMem_Calloc(n_out + 1, sizeof(npy_intp *));
    self->recycled = PyMem_Calloc(n_out + 1, sizeof(PyObject *));
    self->pointers = PyMem_Calloc(n_in + n_out + n_constants + 1, sizeof(void *));
    if (!self->in_descr || !self->in_ndim || !self->in_dims || !self->out_descr || !self->out_ndim ||
        !self->out_dims || !self->recycled || !self->pointers) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n_in; i++) {
        PyObject *descr = PyTuple_GET_ITEM(in_dtypes, i);
        if (!PyArray_DescrCheck(descr)) {
            PyErr_SetString(PyExc_TypeError, "Caller: dtypes must be numpy dtypes");
            return -1;
        }
        self->in_descr[i] = (PyArray_Descr *)descr;
        if (read_shape(PyTuple_GET_ITEM(in_shapes, i), &self->in_ndim[i], &self->in_dims[i]) < 0)
            return -1;
    }
    for (Py_ssize_t k = 0; k < n_out; k++) {
        PyObject *descr = PyTuple_GET_ITEM(out_dtypes, k);
        if (!PyArray_DescrCheck(descr)) {
            PyErr_SetString(PyExc_TypeError, "Caller: dtypes must be numpy dtypes");
            return -1;
        }
        self->out_descr[k] = (PyArray_Descr *)descr;
        if (read_shape(PyTuple_GET_ITEM(out_shapes, k), &self->out_ndim[k], &self->out_dims[k]) < 0)
            return -1;
    }
    for (Py_ssize_t c = 0; c < n_constants; c++) {
        unsigned long long address = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(constants, c));
        if (PyErr_Occurred())
            return -1;
        self->pointers[n_in + n_out + c] = (void *)(uintptr_t)address;
    }
    Py_XSETREF(self->lock_acquire, PyObject_GetAttrString(lock, "acquire"));
    Py_XSETREF(self->lock_release, PyObject_GetAttrString(lock, "release"));
    if (!self->lock_acquire || !self->lock_release)
        return -1;
    Py_INCREF(raise_failure);
    Py_XSETREF(self->raise_failure, raise_failure);
    Py_INCREF(tensor_type);
    Py_XSETREF(self->tensor_type, tensor_type);
    Py_INCREF(args);
    Py_XSETREF(self->keep, args);
    return 0;
}

/* The ndarray an argument passes as it is, or NULL (borrowed reference; no error set). */
static PyArrayObject *plain_input(Caller *self, PyObject *arg, Py_ssize_t i)
{
    PyObject *array = arg;
    if (Py_TYPE(arg) == (PyTypeObject *)self->tensor_type) {
        /* an eager tk.Tensor: its _node is None and it does not require grad */
        PyObject *node = PyObject_GetAttr(arg, str_node);
        if (!node) {
            PyErr_Clear();
            return NULL;
        }
        Py_DECREF(node);
        if (node != Py_None)
            return NULL;
        PyObject *requires_grad = PyObject_GetAttr(arg, str_requires_grad);
        if (!requires_grad) {
            PyErr_Clear();
            return NULL;
        }
        Py_DECREF(requires_grad);
        if (requires_grad != Py_False)
            return NULL;
        array = PyObject_GetAttr(arg, str_value);
        if (!array) {
            PyErr_Clear();
            return NULL;
        }
        Py_DECREF(array);  /* the tensor keeps it alive for the call */
    }
    if (Py_TYPE(array) != &PyArray_Type)
        return NULL;
    PyArrayObject *a = (PyArrayObject *)array;
    if (PyArray_DESCR(a) != self->in_descr[i] || PyArray_NDIM(a) != self->in_ndim[i] ||
        !PyArray_IS_C_CONTIGUOUS(a))
        return NULL;
    npy_intp *dims = PyArray_DIMS(a);
    for (int d = 0; d < self->in_ndim[i]; d++)
        if (dims[d] != self->in_dims[i][d])
            return NULL;
    return a;
}

/* 1 when the baked constants and .grad guards still hold, 0 when not, -1 on an error. */
static int checks_hold(Caller *self)
{
    if (self->baked) {
        for (Py_ssize_t b = 0; b < PyTuple_GET_SIZE(self->baked); b++) {
            PyObject *record = PyTuple_GET_ITEM(self->baked, b);
            PyObject *value = PyObject_GetAttr(PyTuple_GET_ITEM(record, 0), str_value);
            if (!value)
                return -1;
            Py_DECREF(value);  /* compared by identity only */
            if (value != PyTuple_GET_ITEM(record, 1))
                return 0;
            PyObject *count = PyDict_GetItemWithError(self->writes, PyTuple_GET_ITEM(record, 2));
            if (!count && PyErr_Occurred())
                return -1;
            long long now = count ? PyLong_AsLongLong(count) : 0;
            if (now != PyLong_AsLongLong(PyTuple_GET_ITEM(record, 3)))
                return 0;
        }
    }
    if (self->guards) {
        for (Py_ssize_t g = 0; g < PyTuple_GET_SIZE(self->guards); g++) {
            PyObject *record = PyTuple_GET_ITEM(self->guards, g);
            PyObject *grad = PyObject_GetAttr(PyTuple_GET_ITEM(record, 0), str_grad);
            if (!grad)
                return -1;
            Py_DECREF(grad);
            if ((grad != Py_None) != (PyTuple_GET_ITEM(record, 1) == Py_True))
                return 0;
        }
    }
    return 1;
}

static PyObject *caller_set_checks(Caller *self, PyObject *args)
{
    PyObject *baked, *guards, *writes;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyTuple_Type, &baked, &PyTuple_Type, &guards, &PyDict_Type, &writes))
        return NULL;
    for (Py_ssize_t b = 0; b < PyTuple_GET_SIZE(baked); b++) {
        PyObject *record = PyTuple_GET_ITEM(baked, b);
        if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 4 || !PyLong_Check(PyTuple_GET_ITEM(record, 2)) ||
            !PyLong_Check(PyTuple_GET_ITEM(record, 3))) {
            PyErr_SetString(PyExc_TypeError, "set_checks: baked records are (tensor, array, id, writes)");
            return NULL;
        }
    }
    for (Py_ssize_t g = 0; g < PyTuple_GET_SIZE(guards); g++) {
        PyObject *record = PyTuple_GET_ITEM(guards, g);
        if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 2) {
            PyErr_SetString(PyExc_TypeError, "set_checks: guards are (tensor, had_grad)");
            return NULL;
        }
    }
    Py_INCREF(baked);
    Py_XSETREF(self->baked, baked);
    Py_INCREF(guards);
    Py_XSETREF(self->guards, guards);
    Py_INCREF(writes);
    Py_XSETREF(self->writes, writes);
    Py_RETURN_NONE;
}

static PyObject *caller_call(Caller *self, PyObject *args, PyObject *kwds)
{
    if (!self->entry || (kwds && PyDict_GET_SIZE(kwds)) || PyTuple_GET_SIZE(args) != self->n_inputs)
        Py_RETURN_NONE;
    int hold = checks_hold(self);
    if (hold < 0)
        return NULL;
    if (!hold)
        Py_RETURN_NONE;
    Py_ssize_t n_in = self->n_inputs, n_out = self->n_outputs;
    /* The inputs' addresses go to the shared pointer array only under the lock: another thread may be
       inside the entry, reading it, whenever this one holds the GIL. */
    void *on_stack[16];
    void **data = n_in <= 16 ? on_stack : PyMem_Malloc(sizeof(void *) * n_in);
    if (!data)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n_in; i++) {
        PyArrayObject *a = plain_input(self, PyTuple_GET_ITEM(args, i), i);
        if (!a) {
            if (data != on_stack)
                PyMem_Free(data);
            Py_RETURN_NONE;
        }
        data[i] = PyArray_DATA(a);
    }
    PyObject *acquired = PyObject_CallOneArg(self->lock_acquire, Py_False);
    if (!acquired || acquired != Py_True) {  /* another thread is calling this program: the Python path waits */
        if (data != on_stack)
            PyMem_Free(data);
        if (!acquired)
            return NULL;
        Py_DECREF(acquired);
        Py_RETURN_NONE;
    }
    Py_DECREF(acquired);
    for (Py_ssize_t i = 0; i < n_in; i++)
        self->pointers[i] = data[i];
    if (data != on_stack)
        PyMem_Free(data);
    PyObject *result = PyTuple_New(n_out);
    if (!result)
        goto unlock;
    for (Py_ssize_t k = 0; k < n_out; k++) {
        PyObject *out = self->recycled[k];
        if (out && Py_REFCNT(out) == 1) {  /* held by nobody but this Caller: unobservable to reuse */
            Py_INCREF(out);
        } else {
            Py_INCREF(self->out_descr[k]);  /* PyArray_Empty steals it */
            out = PyArray_Empty(self->out_ndim[k], self->out_dims[k], self->out_descr[k], 0);
            if (!out) {
                Py_CLEAR(result);
                goto unlock;
            }
            Py_INCREF(out);
            Py_XSETREF(self->recycled[k], out);
        }
        self->pointers[n_in + k] = PyArray_DATA((PyArrayObject *)out);
        PyTuple_SET_ITEM(result, k, out);
    }
    int status;
    entry_fn entry = self->entry;
    void *const *pointers = self->pointers;
    void *arena = self->arena_cell ? *self->arena_cell : self->arena;  /* read under the lock */
    Py_BEGIN_ALLOW_THREADS
    status = entry(pointers, arena);
    Py_END_ALLOW_THREADS
    if (status) {
        Py_CLEAR(result);
        PyObject *code = PyLong_FromLong(status);
        PyObject *raised = code ? PyObject_CallOneArg(self->raise_failure, code) : NULL;
        Py_XDECREF(code);
        Py_XDECREF(raised);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_RuntimeError, "generated code failed (%d)", status);
    }
unlock:;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *released = PyObject_CallNoArgs(self->lock_release);
    Py_XDECREF(released);
    PyErr_Restore(type, value, traceback);
    return result;
}

static PyObject *caller_invalidate(Caller *self, PyObject *unused)
{
    self->entry = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef caller_methods[] = {
    {"invalidate", (PyCFunction)caller_invalidate, METH_NOARGS, "Never call the entry again (its library is gone)."},
    {"set_checks", (PyCFunction)caller_set_checks, METH_VARARGS, "set_checks(baked, guards, writes): see above."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CallerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_tk_fastcall.Caller",
    .tp_basicsize = sizeof(Caller),
    .tp_dealloc = (destructor)caller_dealloc,
    .tp_call = (ternaryfunc)caller_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The warm call of one compiled program (see the module's comment).",
    .tp_methods = caller_methods,
    .tp_init = (initproc)caller_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef fastcall_module = {
    PyModuleDef_HEAD_INIT, "_tk_fastcall", "The warm call of compiled programs, in C.", -1, NULL,
};

PyMODINIT_FUNC PyInit__tk_fastcall(void)
{
    import_array();
    if (PyType_Ready(&CallerType) < 0)
        return NULL;
    str_value = PyUnicode_InternFromString("_value");
    str_node = PyUnicode_InternFromString("_node");
    str_requires_grad = PyUnicode_InternFromString("_requires_grad");
    str_grad = PyUnicode_InternFromString("_grad");
    if (!str_value || !str_node || !str_requires_grad || !str_grad)
        return NULL;
    PyObject *module = PyModule_Create(&fastcall_module);
    if (!module)
        return NULL;
    Py_INCREF(&CallerType);
    if (PyModule_AddObject(module, "Caller", (PyObject *)&CallerType) < 0) {
        Py_DECREF(&CallerType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
