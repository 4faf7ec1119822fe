/* pulsar_c_api: pulsar-client's C API called from Python with C callbacks, for
   bench/pulsar_direct.py's "c-api" load (a measurement, not the gateway's code).

   pulsar-client's Python binding takes the GIL for every callback from its C++ threads (a send
   receipt, a received message) and makes a pybind11 call per message accessor. Here the
   client, producer and consumer are still the binding's, made through its Python API; only
   the per-message calls go through the C API, on the binding's own C++ objects: the C API's
   handles are structs holding exactly one C++ object (pulsar-client-cpp, lib/c/c_structs.h:
   pulsar_producer_t holds a pulsar::Producer, pulsar_consumer_t a pulsar::Consumer,
   pulsar_consumer_configuration_t a pulsar::ConsumerConfiguration), and pybind11 keeps that
   C++ object's address right after an instance's Python header (gateway/pulsar/
   native_objects.py finds it there; priority_level.py relies on it for configurations after
   a check); listen() checks it the same way. The send callback and the message listener are C: they queue under one
   mutex and write an eventfd only when the queues were empty, and Python takes everything
   queued in one drain() per wake-up.

   The C API's functions are exported by the libpulsar the wheel bundles
   (pulsar_client.libs/libpulsar-*.so); its headers are not shipped, so the prototypes used
   are declared below as in include/pulsar/c/ of pulsar-client-cpp. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct _p pulsar_producer_t;
typedef struct _k pulsar_consumer_t;
typedef struct _kc pulsar_consumer_configuration_t;
typedef struct _m pulsar_message_t;
typedef struct _mi pulsar_message_id_t;
typedef struct _sm pulsar_string_map_t;
typedef int pulsar_result;
typedef void (*pulsar_send_callback)(pulsar_result, pulsar_message_id_t *, void *);
typedef void (*pulsar_message_listener)(pulsar_consumer_t *, pulsar_message_t *, void *);
typedef void (*pulsar_result_callback)(pulsar_result, void *);

void pulsar_consumer_configuration_set_message_listener(pulsar_consumer_configuration_t *, pulsar_message_listener, void *);
int pulsar_consumer_configuration_get_receiver_queue_size(pulsar_consumer_configuration_t *);
pulsar_message_t *pulsar_message_create(void);
void pulsar_message_free(pulsar_message_t *);
void pulsar_message_set_content(pulsar_message_t *, const void *, size_t);
void pulsar_message_set_property(pulsar_message_t *, const char *, const char *);
const void *pulsar_message_get_data(pulsar_message_t *);
uint32_t pulsar_message_get_length(pulsar_message_t *);
pulsar_string_map_t *pulsar_message_get_properties(pulsar_message_t *);
int pulsar_string_map_size(pulsar_string_map_t *);
const char *pulsar_string_map_get_key(pulsar_string_map_t *, int);
const char *pulsar_string_map_get_value(pulsar_string_map_t *, int);
void pulsar_string_map_free(pulsar_string_map_t *);
void pulsar_message_id_free(pulsar_message_id_t *);
void pulsar_producer_send_async(pulsar_producer_t *, pulsar_message_t *, pulsar_send_callback, void *);
void pulsar_consumer_acknowledge_async(pulsar_consumer_t *, pulsar_message_t *, pulsar_result_callback, void *);

/* Receipts (the send's token, negated on failure) and received messages, guarded by one mutex. */
typedef struct { void **items; size_t len, cap; } queue_t;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static queue_t receipts, messages;
static int event_fd = -1;

static void push(queue_t *q, void *item) {
    int wake;
    pthread_mutex_lock(&lock);
    if (q->len == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 1024;
        q->items = realloc(q->items, q->cap * sizeof(void *));
        if (!q->items) abort(); /* a benchmark: out of memory ends it */
    }
    q->items[q->len++] = item;
    wake = receipts.len + messages.len == 1;
    pthread_mutex_unlock(&lock);
    if (wake) { uint64_t one = 1; (void)!write(event_fd, &one, 8); }
}

/* pulsar-client's threads: queue, and wake Python only if it has nothing queued. */
static void on_sent(pulsar_result result, pulsar_message_id_t *id, void *ctx) {
    if (id) pulsar_message_id_free(id);
    push(&receipts, (void *)(intptr_t)(result == 0 ? (intptr_t)ctx : -(intptr_t)ctx));
}
static void on_message(pulsar_consumer_t *c, pulsar_message_t *m, void *ctx) { (void)c; (void)ctx; push(&messages, m); }
static void on_acked(pulsar_result r, void *ctx) { (void)r; (void)ctx; }

/* wake_fd() -> the eventfd to wait on (made once) */
static PyObject *wake_fd(PyObject *self, PyObject *noargs) {
    if (event_fd < 0) event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd < 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(event_fd);
}

/* listen(configuration) -> its receiver queue size: the C listener set on the C++
   ConsumerConfiguration at that address (the binding's own object, see pulsar_direct.py), and
   read back through the C API as a check that the address is one. */
static PyObject *listen_on(PyObject *self, PyObject *args) {
    Py_ssize_t address;
    if (!PyArg_ParseTuple(args, "n", &address)) return NULL;
    pulsar_consumer_configuration_t *conf = (pulsar_consumer_configuration_t *)(intptr_t)address;
    pulsar_consumer_configuration_set_message_listener(conf, on_message, NULL);
    return PyLong_FromLong(pulsar_consumer_configuration_get_receiver_queue_size(conf));
}

/* send(producer, payload, properties, token): through the C++ Producer at that address; the
   token comes back from drain() */
static PyObject *send(PyObject *self, PyObject *args) {
    Py_ssize_t address, token; Py_buffer payload; PyObject *props;
    if (!PyArg_ParseTuple(args, "ny*O!n", &address, &payload, &PyDict_Type, &props, &token)) return NULL;
    pulsar_producer_t *producer = (pulsar_producer_t *)(intptr_t)address;
    pulsar_message_t *m = pulsar_message_create();
    pulsar_message_set_content(m, payload.buf, payload.len);
    PyBuffer_Release(&payload);
    PyObject *k, *v; Py_ssize_t pos = 0;
    while (PyDict_Next(props, &pos, &k, &v)) {
        const char *ks = PyUnicode_AsUTF8(k), *vs = PyUnicode_AsUTF8(v);
        if (!ks || !vs) { pulsar_message_free(m); return NULL; }
        pulsar_message_set_property(m, ks, vs);
    }
    pulsar_producer_send_async(producer, m, on_sent, (void *)token);
    pulsar_message_free(m);
    Py_RETURN_NONE;
}

/* Both queues in one go: a push wakes only when it finds both empty, so they must empty together. */
static void take_all(void ***r, size_t *nr, void ***m, size_t *nm) {
    pthread_mutex_lock(&lock);
    *r = receipts.items; *nr = receipts.len; receipts.items = NULL; receipts.len = receipts.cap = 0;
    *m = messages.items; *nm = messages.len; messages.items = NULL; messages.len = messages.cap = 0;
    pthread_mutex_unlock(&lock);
}

/* drain() -> (list of tokens confirmed (negative: failed), list of (payload, properties, handle)) */
static PyObject *drain(PyObject *self, PyObject *noargs) {
    uint64_t count; (void)!read(event_fd, &count, 8);
    void **r, **m; size_t nr, nm;
    take_all(&r, &nr, &m, &nm);
    PyObject *tokens = PyList_New(nr), *received = PyList_New(nm);
    for (size_t i = 0; i < nr; i++) PyList_SET_ITEM(tokens, i, PyLong_FromSsize_t((Py_ssize_t)(intptr_t)r[i]));
    for (size_t i = 0; i < nm; i++) {
        pulsar_message_t *msg = m[i];
        PyObject *body = PyBytes_FromStringAndSize(pulsar_message_get_data(msg), pulsar_message_get_length(msg));
        pulsar_string_map_t *map = pulsar_message_get_properties(msg);
        PyObject *props = PyDict_New();
        int size = pulsar_string_map_size(map);
        for (int j = 0; j < size; j++) {
            PyObject *v = PyUnicode_FromString(pulsar_string_map_get_value(map, j));
            PyDict_SetItemString(props, pulsar_string_map_get_key(map, j), v);
            Py_DECREF(v);
        }
        pulsar_string_map_free(map);
        PyList_SET_ITEM(received, i, Py_BuildValue("(NNn)", body, props, (Py_ssize_t)(intptr_t)msg));
    }
    free(r); free(m);
    return Py_BuildValue("(NN)", tokens, received);
}

/* ack(consumer, handle): acknowledge a message drain() returned through the C++ Consumer at
   that address, and free the message */
static PyObject *ack(PyObject *self, PyObject *args) {
    Py_ssize_t address, handle;
    if (!PyArg_ParseTuple(args, "nn", &address, &handle)) return NULL;
    pulsar_consumer_t *consumer = (pulsar_consumer_t *)(intptr_t)address;
    pulsar_message_t *m = (pulsar_message_t *)(intptr_t)handle;
    pulsar_consumer_acknowledge_async(consumer, m, on_acked, NULL);
    pulsar_message_free(m);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"wake_fd", wake_fd, METH_NOARGS, NULL}, {"listen", listen_on, METH_VARARGS, NULL},
    {"send", send, METH_VARARGS, NULL},
    {"drain", drain, METH_NOARGS, NULL}, {"ack", ack, METH_VARARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pulsar_c_api", NULL, -1, methods};
PyMODINIT_FUNC PyInit_pulsar_c_api(void) { return PyModule_Create(&module); }
