/* pulsar_c_api: pulsar-client's C API called from Python with C callbacks, for
   bench/pulsar_direct.py's "c-api" load (a measurement, not the gateway's code).

   pulsar-client's Python binding takes the GIL for every callback from its C++ threads (a send
   receipt, a received message) and makes a pybind11 call per message accessor. Here the
   callbacks are C: they queue receipts and messages under a mutex and write an eventfd only
   when the queues were empty, and Python takes everything queued in one drain() per wake-up.
   The C API's functions are exported by the libpulsar the pulsar-client wheel bundles
   (pulsar_client.libs/libpulsar-*.so); its headers are not shipped, so the few prototypes used
   are declared below as in include/pulsar/c/ of pulsar-client-cpp. One client, producer and
   consumer per process; errors are reported as RuntimeError with the C API's result code. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct _c pulsar_client_t;
typedef struct _cc pulsar_client_configuration_t;
typedef struct _p pulsar_producer_t;
typedef struct _pc pulsar_producer_configuration_t;
typedef struct _k pulsar_consumer_t;
typedef struct _kc pulsar_consumer_configuration_t;
typedef struct _m pulsar_message_t;
typedef struct _mi pulsar_message_id_t;
typedef struct _sm pulsar_string_map_t;
typedef int pulsar_result;
typedef void (*pulsar_send_callback)(pulsar_result, pulsar_message_id_t *, void *);
typedef void (*pulsar_message_listener)(pulsar_consumer_t *, pulsar_message_t *, void *);
typedef void (*pulsar_result_callback)(pulsar_result, void *);

pulsar_client_configuration_t *pulsar_client_configuration_create(void);
pulsar_client_t *pulsar_client_create(const char *, const pulsar_client_configuration_t *);
pulsar_producer_configuration_t *pulsar_producer_configuration_create(void);
void pulsar_producer_configuration_set_batching_enabled(pulsar_producer_configuration_t *, int);
void pulsar_producer_configuration_set_max_pending_messages(pulsar_producer_configuration_t *, int);
pulsar_result pulsar_client_create_producer(pulsar_client_t *, const char *, const pulsar_producer_configuration_t *, pulsar_producer_t **);
pulsar_consumer_configuration_t *pulsar_consumer_configuration_create(void);
void pulsar_consumer_configuration_set_consumer_type(pulsar_consumer_configuration_t *, int);
void pulsar_consumer_configuration_set_receiver_queue_size(pulsar_consumer_configuration_t *, int);
void pulsar_consumer_configuration_set_message_listener(pulsar_consumer_configuration_t *, pulsar_message_listener, void *);
pulsar_result pulsar_client_subscribe(pulsar_client_t *, const char *, const char *, const pulsar_consumer_configuration_t *, pulsar_consumer_t **);
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
static pulsar_client_t *client;
static pulsar_producer_t *producer;
static pulsar_consumer_t *consumer;

static void push(queue_t *q, void *item) {
    int wake;
    pthread_mutex_lock(&lock);
    if (q->len == q->cap) { q->cap = q->cap ? 2 * q->cap : 1024; q->items = realloc(q->items, q->cap * sizeof(void *)); }
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

/* start(service_url, topic, subscription, max_pending, receiver_queue) -> the eventfd to wait on */
static PyObject *start(PyObject *self, PyObject *args) {
    const char *url, *topic, *sub; int pending, queue;
    if (!PyArg_ParseTuple(args, "sssii", &url, &topic, &sub, &pending, &queue)) return NULL;
    event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    client = pulsar_client_create(url, pulsar_client_configuration_create());
    pulsar_consumer_configuration_t *kc = pulsar_consumer_configuration_create();
    pulsar_consumer_configuration_set_consumer_type(kc, 1 /* Shared */);
    pulsar_consumer_configuration_set_receiver_queue_size(kc, queue);
    pulsar_consumer_configuration_set_message_listener(kc, on_message, NULL);
    pulsar_result r;
    Py_BEGIN_ALLOW_THREADS
    r = pulsar_client_subscribe(client, topic, sub, kc, &consumer);
    Py_END_ALLOW_THREADS
    if (r) return PyErr_Format(PyExc_RuntimeError, "subscribe: %d", r);
    pulsar_producer_configuration_t *pc = pulsar_producer_configuration_create();
    pulsar_producer_configuration_set_batching_enabled(pc, 0);
    pulsar_producer_configuration_set_max_pending_messages(pc, pending);
    Py_BEGIN_ALLOW_THREADS
    r = pulsar_client_create_producer(client, topic, pc, &producer);
    Py_END_ALLOW_THREADS
    if (r) return PyErr_Format(PyExc_RuntimeError, "producer: %d", r);
    return PyLong_FromLong(event_fd);
}

/* send(payload, properties, token): one entry (batching off); the token comes back from drain() */
static PyObject *send(PyObject *self, PyObject *args) {
    Py_buffer payload; PyObject *props; Py_ssize_t token;
    if (!PyArg_ParseTuple(args, "y*O!n", &payload, &PyDict_Type, &props, &token)) return NULL;
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

/* ack(handle): acknowledge a message drain() returned, and free it */
static PyObject *ack(PyObject *self, PyObject *args) {
    Py_ssize_t handle;
    if (!PyArg_ParseTuple(args, "n", &handle)) return NULL;
    pulsar_message_t *m = (pulsar_message_t *)(intptr_t)handle;
    pulsar_consumer_acknowledge_async(consumer, m, on_acked, NULL);
    pulsar_message_free(m);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"start", start, METH_VARARGS, NULL}, {"send", send, METH_VARARGS, NULL},
    {"drain", drain, METH_NOARGS, NULL}, {"ack", ack, METH_VARARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pulsar_c_api", NULL, -1, methods};
PyMODINIT_FUNC PyInit_pulsar_c_api(void) { return PyModule_Create(&module); }
