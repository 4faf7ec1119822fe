/* Doorbell: how the listener and the sender (listener.c, sender.c) wake trio from
   pulsar-client's C++ threads without the GIL; gateway/pulsar/doorbell.py keeps one per trio
   run and a task that waits on it.

   A C++ thread that has something for Python "rings" with the number its Listener or Sender
   was given: the number is queued under the doorbell's mutex and, when the queue was empty,
   its eventfd is written. Trio's task sees the eventfd readable and ``take()``s the numbers.
   Calling Python from those threads instead (PyGILState_Ensure and a call) made them wait for
   the GIL while the trio thread ran Python; for the sender's receipts that thread is the
   connection's I/O thread, so every consumer and producer of the client waited with it
   (docs/performance.md, "Issue 16: waking trio without the GIL").

   The memory is shared: the Python object holds one reference and every Listener or Sender
   using it holds one until it closes, so a ring from a C++ thread never finds it freed. */
#include "common.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct doorbell {
    pthread_mutex_t lock;
    int fd;         /* eventfd: readable while numbers wait */
    long refs;      /* (lock) */
    long long *rung; /* (lock) numbers rung since the last take, oldest first */
    size_t len, cap;
    int lost;       /* (lock) a number did not fit (no memory): take() says so */
};

void doorbell_retain(doorbell_t *bell) {
    pthread_mutex_lock(&bell->lock);
    bell->refs++;
    pthread_mutex_unlock(&bell->lock);
}

void doorbell_release(doorbell_t *bell) {
    pthread_mutex_lock(&bell->lock);
    int last = --bell->refs == 0;
    pthread_mutex_unlock(&bell->lock);
    if (last) {
        close(bell->fd);
        free(bell->rung);
        pthread_mutex_destroy(&bell->lock);
        free(bell);
    }
}

void doorbell_ring(doorbell_t *bell, long long number) {
    pthread_mutex_lock(&bell->lock);
    int was_quiet = bell->len == 0 && !bell->lost;
    if (room_for_one((void **)&bell->rung, &bell->cap, bell->len, sizeof(long long)))
        bell->rung[bell->len++] = number;
    else
        bell->lost = 1;
    if (was_quiet) {
        /* EAGAIN only if the counter is near 2^64: readable anyway. */
        uint64_t one = 1;
        ssize_t written = write(bell->fd, &one, sizeof one);
        (void)written;
    }
    pthread_mutex_unlock(&bell->lock);
}

typedef struct {
    PyObject_HEAD
    doorbell_t *bell;
} DoorbellObject;

static int doorbell_init(DoorbellObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "", names)) return -1;
    if (self->bell) {
        PyErr_SetString(PyExc_RuntimeError, "Doorbell already initialized");
        return -1;
    }
    doorbell_t *bell = calloc(1, sizeof(doorbell_t));
    if (!bell) {
        PyErr_NoMemory();
        return -1;
    }
    bell->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (bell->fd < 0) {
        free(bell);
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&bell->lock, NULL);
    bell->refs = 1;
    self->bell = bell;
    return 0;
}

static void doorbell_dealloc(DoorbellObject *self) {
    if (self->bell) doorbell_release(self->bell);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

doorbell_t *doorbell_of(PyObject *object) {
    if (Py_TYPE(object) != &DoorbellType || !((DoorbellObject *)object)->bell) {
        PyErr_Format(PyExc_TypeError, "expected a Doorbell, not %.100s", Py_TYPE(object)->tp_name);
        return NULL;
    }
    return ((DoorbellObject *)object)->bell;
}

static PyObject *doorbell_fileno(DoorbellObject *self, PyObject *unused) {
    if (!self->bell) {
        PyErr_SetString(PyExc_RuntimeError, "Doorbell not initialized");
        return NULL;
    }
    return PyLong_FromLong(self->bell->fd);
}

/* take() -> [number] in the order rung, or None when some did not fit (ring everyone). The
   eventfd is read first: a ring after that is either taken here or writes it again. */
static PyObject *doorbell_take(DoorbellObject *self, PyObject *unused) {
    doorbell_t *bell = self->bell;
    if (!bell) return PyList_New(0);
    uint64_t count;
    ssize_t read_size = read(bell->fd, &count, sizeof count);
    (void)read_size; /* EAGAIN: nothing rung since the last take */
    pthread_mutex_lock(&bell->lock);
    long long *rung = bell->rung;
    size_t len = bell->len;
    int lost = bell->lost;
    bell->rung = NULL;
    bell->len = bell->cap = 0;
    bell->lost = 0;
    pthread_mutex_unlock(&bell->lock);
    PyObject *result = NULL;
    if (lost) {
        result = Py_NewRef(Py_None);
    } else {
        result = PyList_New((Py_ssize_t)len);
        for (size_t i = 0; result && i < len; i++) {
            PyObject *number = PyLong_FromLongLong(rung[i]);
            if (!number) Py_CLEAR(result);
            else PyList_SET_ITEM(result, (Py_ssize_t)i, number);
        }
    }
    free(rung);
    return result;
}

static PyMethodDef doorbell_methods[] = {
    {"fileno", (PyCFunction)doorbell_fileno, METH_NOARGS, NULL},
    {"take", (PyCFunction)doorbell_take, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

PyTypeObject DoorbellType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_starlight_compiled.Doorbell",
    .tp_basicsize = sizeof(DoorbellObject),
    .tp_dealloc = (destructor)doorbell_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Doorbell(): numbers rung from C++ threads, an eventfd readable while they wait.",
    .tp_methods = doorbell_methods,
    .tp_init = (initproc)doorbell_init,
    .tp_new = PyType_GenericNew,
};
