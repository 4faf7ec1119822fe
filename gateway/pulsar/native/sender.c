/* Grouped sends for gateway/pulsar/producer.py: Outgoing, a message built at its submit, and
   Sender, one per TrioProducer, which sends a group of them through the C API (one call from
   Python for the group), the last with a callback that queues its receipt. A sender with
   receipts queued rings its Doorbell once (doorbell.c), without the GIL, and Python drains
   them all. Receipts of the sends Python makes through the binding are queued here too
   (``receipt``), so that Python sees every receipt in the order pulsar-client gave them. */
#include "common.h"

typedef struct {
    long long token;
    int result; /* pulsar_result; -1: Python has the result already */
} receipt_t;

typedef struct sender {
    ringer_t ringer; /* first: the bell hands it back as the sender */
    pthread_mutex_t lock;
    receipt_t *items; /* (lock) */
    size_t len, cap;
    int rung;   /* (lock) rang, and not drained since */
    int closed; /* (lock) */
    long refs;  /* (lock) the Python object + each send whose callback is due + a ring */
    doorbell_t *bell;
} sender_t;

typedef struct {
    sender_t *sender;
    long long token;
} sent_t;

static void sender_release(sender_t *sender) {
    pthread_mutex_lock(&sender->lock);
    int last = --sender->refs == 0;
    pthread_mutex_unlock(&sender->lock);
    if (last) {
        doorbell_release(sender->bell);
        free(sender->items);
        pthread_mutex_destroy(&sender->lock);
        free(sender);
    }
}

static void release_ringer(ringer_t *ringer) { sender_release((sender_t *)ringer); }

/* Any thread: queue a receipt; 0 when memory ran out (it is lost, and so is its group). */
static int sender_push(sender_t *sender, long long token, int result) {
    int ring = 0;
    pthread_mutex_lock(&sender->lock);
    if (!room_for_one((void **)&sender->items, &sender->cap, sender->len, sizeof(receipt_t))) {
        pthread_mutex_unlock(&sender->lock);
        return 0;
    }
    sender->items[sender->len].token = token;
    sender->items[sender->len].result = result;
    sender->len++;
    if (!sender->rung && !sender->closed) {
        ring = sender->rung = 1;
        sender->refs++; /* the bell's, until Python takes the ring */
    }
    pthread_mutex_unlock(&sender->lock);
    if (ring && !doorbell_ring(sender->bell, &sender->ringer)) {
        pthread_mutex_lock(&sender->lock);
        sender->rung = 0; /* the next receipt rings again */
        pthread_mutex_unlock(&sender->lock);
        sender_release(sender);
    }
    return 1;
}

/* pulsar-client's I/O thread (or the sending thread, for a send refused at once). */
static void on_sent(pulsar_result result, pulsar_message_id_t *id, void *context) {
    sent_t *sent = context;
    if (id) pulsar_message_id_free(id);
    sender_push(sent->sender, sent->token, result);
    sender_release(sent->sender);
    free(sent);
}

/* The other messages of a group: Pulsar's C API calls every send's callback. */
static void on_sent_quietly(pulsar_result result, pulsar_message_id_t *id, void *context) {
    if (id) pulsar_message_id_free(id);
}

typedef struct {
    PyObject_HEAD
    sender_t *sender;
} SenderObject;

static int sender_init(SenderObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"on_ready", "doorbell", NULL};
    PyObject *on_ready, *doorbell;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO", names, &on_ready, &doorbell)) return -1;
    doorbell_t *bell = doorbell_of(doorbell);
    if (!bell) return -1;
    if (self->sender) {
        PyErr_SetString(PyExc_RuntimeError, "Sender already initialized");
        return -1;
    }
    sender_t *sender = calloc(1, sizeof(sender_t));
    if (!sender) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_mutex_init(&sender->lock, NULL);
    sender->refs = 1;
    sender->ringer.on_ready = Py_NewRef(on_ready);
    sender->ringer.release = release_ringer;
    doorbell_retain(bell);
    sender->bell = bell;
    self->sender = sender;
    return 0;
}

static void sender_dealloc(SenderObject *self) {
    sender_t *sender = self->sender;
    if (sender) {
        pthread_mutex_lock(&sender->lock);
        sender->closed = 1;
        pthread_mutex_unlock(&sender->lock);
        Py_CLEAR(sender->ringer.on_ready);
        sender_release(sender);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A str as a C string for Pulsar's C API, which takes NUL-terminated strings: one with a NUL
   inside cannot go this way (ValueError; the caller sends it through the binding). */
static const char *c_string(PyObject *text) {
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "Pulsar properties are str, not %.100s",
                     Py_TYPE(text)->tp_name);
        return NULL;
    }
    Py_ssize_t size;
    const char *data = PyUnicode_AsUTF8AndSize(text, &size);
    if (data && (size_t)size != strlen(data)) {
        PyErr_SetString(PyExc_ValueError, "a property with a NUL character");
        return NULL;
    }
    return data;
}

/* Outgoing(payload, properties): a message built for send_group. Building it is where a
   refused property shows: TypeError (not str), ValueError (a NUL: the binding can send that
   one, the C API cannot). */
typedef struct {
    PyObject_HEAD
    pulsar_message_t *message;
} OutgoingObject;

static int outgoing_init(OutgoingObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"payload", "properties", NULL};
    Py_buffer view;
    PyObject *properties = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|O", names, &view, &properties)) return -1;
    if (self->message) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "Outgoing already initialized");
        return -1;
    }
    pulsar_message_t *message = pulsar_message_create();
    pulsar_message_set_content(message, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    if (properties != Py_None) {
        if (!PyDict_Check(properties)) {
            PyErr_SetString(PyExc_TypeError, "properties must be a dict or None");
            pulsar_message_free(message);
            return -1;
        }
        PyObject *key, *value;
        Py_ssize_t position = 0;
        while (PyDict_Next(properties, &position, &key, &value)) {
            const char *k = c_string(key), *v = k ? c_string(value) : NULL;
            if (!v) {
                pulsar_message_free(message);
                return -1;
            }
            pulsar_message_set_property(message, k, v);
        }
    }
    self->message = message;
    return 0;
}

static void outgoing_dealloc(OutgoingObject *self) {
    if (self->message) pulsar_message_free(self->message);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyTypeObject OutgoingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_starlight_compiled.Outgoing",
    .tp_basicsize = sizeof(OutgoingObject),
    .tp_dealloc = (destructor)outgoing_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Outgoing(payload, properties=None): a message built for Sender.send_group.",
    .tp_init = (initproc)outgoing_init,
    .tp_new = PyType_GenericNew,
};

static void flushed(pulsar_result result, void *unused) {
    (void)result; /* each send's own receipt reports its result */
    (void)unused;
}

/* send_group(producer, token, [Outgoing], flush=False): every message through the C++ Producer
   of that _pulsar.Producer, in order; the last one's receipt comes back as ``token``. With
   ``flush`` a batching producer sends what it batched at once, the group as one entry, rather
   than after its publish delay. */
static PyObject *sender_send_group(SenderObject *self, PyObject *args) {
    PyObject *producer, *items;
    long long token;
    int flush = 0;
    if (!PyArg_ParseTuple(args, "OLO!|p", &producer, &token, &PyList_Type, &items, &flush))
        return NULL;
    sender_t *sender = self->sender;
    if (!sender) {
        PyErr_SetString(PyExc_RuntimeError, "Sender not initialized");
        return NULL;
    }
    pulsar_producer_t *native = checked_object(producer, PRODUCER);
    if (!native) return NULL;
    Py_ssize_t count = PyList_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (Py_TYPE(item) != &OutgoingType || !((OutgoingObject *)item)->message) {
            PyErr_SetString(PyExc_TypeError, "send_group sends Outgoing messages");
            return NULL;
        }
    }
    if (count == 0) Py_RETURN_NONE;
    sent_t *sent = malloc(sizeof(sent_t));
    pulsar_message_t **messages = malloc((size_t)count * sizeof(pulsar_message_t *));
    if (!sent || !messages) {
        free(sent);
        free(messages);
        return PyErr_NoMemory();
    }
    sent->sender = sender;
    sent->token = token;
    pthread_mutex_lock(&sender->lock);
    sender->refs++;
    pthread_mutex_unlock(&sender->lock);
    for (Py_ssize_t i = 0; i < count; i++)
        messages[i] = ((OutgoingObject *)PyList_GET_ITEM(items, i))->message;
    /* Without the GIL: the I/O thread may call into Python (the callback of a send made
       through the binding) while it holds the producer's lock; sending with the GIL held
       could then deadlock (seen under AddressSanitizer, tests/integration/test_native_asan.py,
       when receipts called into Python too). The Outgoing objects stay alive in ``items``,
       which the caller holds. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i == count - 1) pulsar_producer_send_async(native, messages[i], on_sent, sent);
        else pulsar_producer_send_async(native, messages[i], on_sent_quietly, NULL);
    }
    if (flush) pulsar_producer_flush_async(native, flushed, NULL);
    Py_END_ALLOW_THREADS
    free(messages);
    Py_RETURN_NONE;
}

/* receipt(token[, result]): queue a receipt from Python (a send made through the binding;
   -1: its handle has the result already), in line with the compiled sends' receipts. */
static PyObject *sender_receipt(SenderObject *self, PyObject *args) {
    long long token;
    int result = -1;
    if (!PyArg_ParseTuple(args, "L|i", &token, &result)) return NULL;
    if (!self->sender) {
        PyErr_SetString(PyExc_RuntimeError, "Sender not initialized");
        return NULL;
    }
    if (!sender_push(self->sender, token, result)) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* drain() -> [(token, result)] in the order they came; the next receipt rings again. */
static PyObject *sender_drain(SenderObject *self, PyObject *unused) {
    sender_t *sender = self->sender;
    if (!sender) return PyList_New(0);
    pthread_mutex_lock(&sender->lock);
    receipt_t *items = sender->items;
    size_t len = sender->len;
    sender->items = NULL;
    sender->len = sender->cap = 0;
    sender->rung = 0;
    pthread_mutex_unlock(&sender->lock);
    PyObject *result = PyList_New((Py_ssize_t)len);
    for (size_t i = 0; result && i < len; i++) {
        PyObject *pair = Py_BuildValue("(Li)", items[i].token, items[i].result);
        if (!pair) Py_CLEAR(result);
        else PyList_SET_ITEM(result, (Py_ssize_t)i, pair);
    }
    free(items);
    return result;
}

static PyMethodDef sender_methods[] = {
    {"send_group", (PyCFunction)sender_send_group, METH_VARARGS, NULL},
    {"receipt", (PyCFunction)sender_receipt, METH_VARARGS, NULL},
    {"drain", (PyCFunction)sender_drain, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

PyTypeObject SenderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_starlight_compiled.Sender",
    .tp_basicsize = sizeof(SenderObject),
    .tp_dealloc = (destructor)sender_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Sender(on_ready, doorbell): grouped sends and their receipts for one TrioProducer.",
    .tp_methods = sender_methods,
    .tp_init = (initproc)sender_init,
    .tp_new = PyType_GenericNew,
};

