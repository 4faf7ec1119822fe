/* Doorbell: how pulsar-client's I/O thread tells the trio thread that a sender's receipts
   (sender.c) are waiting, without the GIL (gateway/pulsar/doorbell.py runs the trio side).

   A sender with news rings once (until Python drains it, which only this path does: a ringer
   is on the list at most once); the ring puts it on the bell's list and, when the list was
   empty, writes the bell's eventfd, which trio's I/O manager watches. Python takes the list
   (``take``) and calls each one's ``on_ready``. The I/O thread never holds the GIL for this,
   so the trio thread, woken by the eventfd, finds the GIL free: a Python call from the I/O
   thread (``TrioToken.run_sync_soon``) held it through the call and its write to trio's
   wake-up socket, and the woken trio thread then waited for it.

   No wake-up is lost: every ring that finds the list empty writes the eventfd after it has
   added to the list, and ``take`` reads the eventfd before it takes the list (``take``). */
#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common.h"

struct doorbell {
    pthread_mutex_t lock;
    int fd;
    ringer_t **rung; /* (lock) the ringers since the last take, each holding a reference */
    size_t len, cap;
    long refs; /* (lock) the Python object + each ringer that may ring it */
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

int doorbell_ring(doorbell_t *bell, ringer_t *ringer) {
    pthread_mutex_lock(&bell->lock);
    if (!room_for_one((void **)&bell->rung, &bell->cap, bell->len, sizeof(ringer_t *))) {
        pthread_mutex_unlock(&bell->lock);
        return 0;
    }
    int first = bell->len == 0;
    bell->rung[bell->len++] = ringer;
    pthread_mutex_unlock(&bell->lock);
    if (first) {
        uint64_t one = 1;
        /* EAGAIN only when the counter is full: it is non-zero then, and the trio side wakes. */
        ssize_t written;
        do written = write(bell->fd, &one, sizeof one);
        while (written < 0 && errno == EINTR);
    }
    return 1;
}

typedef struct {
    PyObject_HEAD
    doorbell_t *bell;
} DoorbellObject;

doorbell_t *doorbell_of(PyObject *object) {
    if (Py_TYPE(object) != &DoorbellType || !((DoorbellObject *)object)->bell) {
        PyErr_SetString(PyExc_TypeError, "expected an initialized Doorbell");
        return NULL;
    }
    return ((DoorbellObject *)object)->bell;
}

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
    bell->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (bell->fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        free(bell);
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

static PyObject *doorbell_fileno(DoorbellObject *self, PyObject *unused) {
    if (!doorbell_of((PyObject *)self)) return NULL;
    return PyLong_FromLong(self->bell->fd);
}

/* take() -> [on_ready] of the ringers since the last take (those closed since left out). */
static PyObject *doorbell_take(DoorbellObject *self, PyObject *unused) {
    doorbell_t *bell = doorbell_of((PyObject *)self);
    if (!bell) return NULL;
    /* The eventfd is read before the list is taken: a ring between the two is taken with
       the list (its write, if it made one, wakes the trio side once more, for an empty
       take). Read after the swap, it could eat the write of a ring that found the swapped
       list empty: that ringer would sit on the list with nothing to wake the trio side, and
       ring no more until drained. */
    uint64_t count;
    ssize_t got;
    do got = read(bell->fd, &count, sizeof count);
    while (got < 0 && errno == EINTR);
    pthread_mutex_lock(&bell->lock);
    ringer_t **rung = bell->rung;
    size_t len = bell->len;
    bell->rung = NULL;
    bell->len = bell->cap = 0;
    pthread_mutex_unlock(&bell->lock);
    PyObject *result = PyList_New(0);
    for (size_t i = 0; i < len; i++) {
        ringer_t *ringer = rung[i];
        if (result && ringer->on_ready && PyList_Append(result, ringer->on_ready) < 0)
            Py_CLEAR(result);
        ringer->release(ringer);
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
    .tp_doc = "Doorbell(): an eventfd that senders ring from any thread without the GIL.",
    .tp_methods = doorbell_methods,
    .tp_init = (initproc)doorbell_init,
    .tp_new = PyType_GenericNew,
};
