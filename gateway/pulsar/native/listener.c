/* The message listener (Listener) and the messages it hands over (Message), for
   gateway/pulsar/consumer.py.

   The listener is C, set through Pulsar's C API on the binding's own
   ConsumerConfiguration before the binding subscribes with it: a message is queued under a
   mutex without the GIL, and Python is woken (one call of its ``on_ready``, with the GIL) only
   when the queue goes from empty to not empty; ``drain()`` then takes everything queued in one
   call. A drained ``Message`` answers the accessors the gateway uses (data, properties,
   topic_name, ids, timestamps) from C, and acknowledges through the C API on the C++ Consumer
   of the binding's consumer object that received it, with no callback.

   What bounds memory is kept from the Python listener (consumer.py's docstring): ``held``
   counts the messages queued here plus those Python holds in its buffer (Python reports the
   ones that leave it with ``left()``); the message that brings ``held`` to the capacity
   pauses every attached consumer, and any message arriving while it is there pauses the one
   that delivered it. Pauses happen under the mutex, so a pause and Python's resume (outside
   it, through the binding) cannot leave a consumer paused with the buffer empty: a consumer
   resumed while the buffer is full is paused again by its next message.

   The configuration keeps a pointer to a ``tag_t`` for as long as the C++ consumer lives, and
   C++ may run a listener call after the consumer closed: a closed Listener's memory is freed
   only a minute after its close (``bury``), and a listener call on a closed one drops the
   message unacknowledged (Pulsar redelivers it, as with the Python listener). */
#include "common.h"

typedef struct core core_t;

/* What the C++ listener gets as its context: one per subscribed topic. */
typedef struct tag {
    core_t *core;
    int number;
    int detached; /* (lock) its messages are dropped from now on */
    struct tag *next;
} tag_t;

typedef struct {
    tag_t *tag;
    pulsar_message_t *message;
} item_t;

/* A TrioConsumer's listener state. Fields marked (lock) are guarded by ``lock``; (GIL) ones are
   only touched with the GIL held. */
struct core {
    pthread_mutex_t lock;
    item_t *items; /* (lock) queued, oldest first */
    size_t len, cap;
    long held;      /* (lock) queued here + in Python's buffer */
    long capacity;  /* pause at this many held */
    long low_water; /* ``left`` says resume at or below this */
    int full;       /* (lock) a consumer was paused since the last resume */
    int wake_pending; /* (lock) on_ready called and drain() not yet */
    int closed;     /* (lock) */
    tag_t *tags;    /* (lock) every tag ever made, freed with the core */
    int tag_count;  /* (lock) */
    /* (GIL and lock to change, either to read) tag number -> the binding's consumer, or NULL:
       not attached */
    PyObject **consumers;
    int consumers_size;
    PyObject *on_ready;   /* (GIL) */
    time_t closed_at;
    core_t *next_dead;
};

static void core_free(core_t *core) {
    tag_t *tag = core->tags;
    while (tag) {
        tag_t *next = tag->next;
        free(tag);
        tag = next;
    }
    free(core->items);
    free(core->consumers);
    pthread_mutex_destroy(&core->lock);
    free(core);
}

/* Closed cores, freed a minute after their close (with the GIL, from new Listeners). */
static core_t *graveyard;
#define GRACE_SECONDS 60

static void bury(core_t *core) {
    core->closed_at = time(NULL);
    core->next_dead = graveyard;
    graveyard = core;
    core_t **link = &graveyard;
    while (*link) {
        core_t *dead = *link;
        if (time(NULL) - dead->closed_at >= GRACE_SECONDS) {
            *link = dead->next_dead;
            core_free(dead);
        } else {
            link = &dead->next_dead;
        }
    }
}

/* pulsar-client's listener thread, without the GIL. */
static void on_message(pulsar_consumer_t *consumer, pulsar_message_t *message, void *context) {
    tag_t *tag = context;
    core_t *core = tag->core;
    int call_wake = 0;
    pthread_mutex_lock(&core->lock);
    if (core->closed || tag->detached) {
        pthread_mutex_unlock(&core->lock);
        pulsar_message_free(message); /* unacknowledged: the broker redelivers it */
        return;
    }
    if (!room_for_one((void **)&core->items, &core->cap, core->len, sizeof(item_t))) {
        /* out of memory: leave it to the broker, and stop this consumer */
        pulsar_consumer_pause_message_listener(consumer);
        core->full = 1;
        pthread_mutex_unlock(&core->lock);
        pulsar_message_free(message);
        return;
    }
    core->items[core->len].tag = tag;
    core->items[core->len].message = message;
    core->len++;
    if (++core->held >= core->capacity) {
        if (!core->full) {
            core->full = 1;
            /* The binding's consumer objects are referenced from ``consumers`` as long as they
               are there, and only changed under this lock. */
            for (int i = 0; i < core->tag_count; i++)
                if (core->consumers[i])
                    pulsar_consumer_pause_message_listener(cpp_object(core->consumers[i]));
        }
        pulsar_consumer_pause_message_listener(consumer);
    }
    if (!core->wake_pending) call_wake = core->wake_pending = 1;
    pthread_mutex_unlock(&core->lock);
    if (call_wake) wake_python(&core->on_ready);
}

/* ------------------------------------------------------------------------------------------ */
/* Message: one received message; owns its pulsar_message_t and a reference to its consumer. */

typedef struct {
    PyObject_HEAD
    pulsar_message_t *message;
    PyObject *consumer; /* the binding's _pulsar.Consumer it came from */
} MessageObject;

static void message_dealloc(MessageObject *self) {
    if (self->message) pulsar_message_free(self->message);
    Py_XDECREF(self->consumer);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *message_data(MessageObject *self, PyObject *unused) {
    return PyBytes_FromStringAndSize(pulsar_message_get_data(self->message),
                                     pulsar_message_get_length(self->message));
}

/* Topic names, property names and values come by again and again (the gateway's own, a
   publisher's same header, exchange and routing key): the str of each recently seen one is
   kept, direct-mapped by a hash of its bytes, and handed out again. A message's properties
   then make no new str for what was seen before, and the str keeps its hash for the dict
   lookups that follow (the Python side looks the raw header up in a cache by its value).
   Guarded by the GIL: only ``properties()`` and ``topic_name()`` use them. Strings are
   immutable, so sharing one is unobservable. */
#define SEEN_SLOTS 64
#define SEEN_MAX_LENGTH 512

typedef struct {
    PyObject *str;    /* a reference of the table's own, or NULL */
    const char *utf8; /* its UTF-8, the bytes it was made of (kept by ``str``) */
    Py_ssize_t length;
} seen_t;

static seen_t seen[SEEN_SLOTS];

/* FNV-1a over the length, the first 16 bytes and the last 8. */
static size_t seen_slot(const char *text, size_t length) {
    uint64_t hash = 14695981039346656037ULL ^ length;
    size_t head = length < 16 ? length : 16;
    for (size_t i = 0; i < head; i++) hash = (hash ^ (unsigned char)text[i]) * 1099511628211ULL;
    for (size_t i = length > 24 ? length - 8 : length; i < length; i++)
        hash = (hash ^ (unsigned char)text[i]) * 1099511628211ULL;
    return (size_t)(hash % SEEN_SLOTS);
}

/* A new reference to the str of ``text`` (strict UTF-8, as PyUnicode_FromString). */
static PyObject *seen_str(const char *text) {
    size_t length = strlen(text);
    if (length > SEEN_MAX_LENGTH) return PyUnicode_FromStringAndSize(text, (Py_ssize_t)length);
    seen_t *entry = &seen[seen_slot(text, length)];
    if (entry->str && entry->length == (Py_ssize_t)length &&
        memcmp(entry->utf8, text, length) == 0) {
        Py_INCREF(entry->str);
        return entry->str;
    }
    PyObject *str = PyUnicode_FromStringAndSize(text, (Py_ssize_t)length);
    if (!str) return NULL;
    Py_ssize_t utf8_length;
    const char *utf8 = PyUnicode_AsUTF8AndSize(str, &utf8_length);
    if (!utf8) {
        PyErr_Clear(); /* not kept, still returned */
        return str;
    }
    Py_INCREF(str);
    Py_XSETREF(entry->str, str);
    entry->utf8 = utf8;
    entry->length = utf8_length;
    return str;
}

static PyObject *message_properties(MessageObject *self, PyObject *unused) {
    PyObject *properties = PyDict_New();
    if (!properties) return NULL;
    pulsar_string_map_t *map = pulsar_message_get_properties(self->message);
    int size = pulsar_string_map_size(map);
    for (int i = 0; i < size; i++) {
        PyObject *key = seen_str(pulsar_string_map_get_key(map, i));
        PyObject *value = key ? seen_str(pulsar_string_map_get_value(map, i)) : NULL;
        if (!value || PyDict_SetItem(properties, key, value)) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_DECREF(properties);
            pulsar_string_map_free(map);
            return NULL;
        }
        Py_DECREF(key);
        Py_DECREF(value);
    }
    pulsar_string_map_free(map);
    return properties;
}

static PyObject *message_topic_name(MessageObject *self, PyObject *unused) {
    /* One of a few topics, asked once per message and then a key of several dicts (the
       topic's decoded name, the redelivery key, the outstanding count): a seen str keeps
       its hash. */
    return seen_str(pulsar_message_get_topic_name(self->message));
}

/* (topic_name(), data(), properties()) in one call: the delivery path reads all three of every
   message, and each call from Python costs more than the C behind it. */
static PyObject *message_contents(MessageObject *self, PyObject *unused) {
    PyObject *topic = message_topic_name(self, NULL);
    if (!topic) return NULL;
    PyObject *data = message_data(self, NULL);
    if (!data) {
        Py_DECREF(topic);
        return NULL;
    }
    PyObject *properties = message_properties(self, NULL);
    if (!properties) {
        Py_DECREF(topic);
        Py_DECREF(data);
        return NULL;
    }
    PyObject *contents = PyTuple_New(3);
    if (!contents) {
        Py_DECREF(topic);
        Py_DECREF(data);
        Py_DECREF(properties);
        return NULL;
    }
    PyTuple_SET_ITEM(contents, 0, topic);
    PyTuple_SET_ITEM(contents, 1, data);
    PyTuple_SET_ITEM(contents, 2, properties);
    return contents;
}

static PyObject *message_partition_key(MessageObject *self, PyObject *unused) {
    return PyUnicode_FromString(pulsar_message_get_partitionKey(self->message));
}

static PyObject *message_redelivery_count(MessageObject *self, PyObject *unused) {
    return PyLong_FromLong(pulsar_message_get_redelivery_count(self->message));
}

static PyObject *message_publish_timestamp(MessageObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(pulsar_message_get_publish_timestamp(self->message));
}

static PyObject *message_event_timestamp(MessageObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(pulsar_message_get_event_timestamp(self->message));
}

/* The message id serialized (as _pulsar.MessageId.serialize() gives it). */
static PyObject *message_id_bytes(MessageObject *self, PyObject *unused) {
    pulsar_message_id_t *id = pulsar_message_get_message_id(self->message);
    int length = 0;
    void *serialized = pulsar_message_id_serialize(id, &length);
    pulsar_message_id_free(id);
    PyObject *result = PyBytes_FromStringAndSize(serialized, length);
    free(serialized);
    return result;
}

/* Fire and forget, like the Python path's acknowledge_async(..., ignore_result): a failure
   (the consumer closed) leaves the message to be redelivered. */
static PyObject *message_acknowledge(MessageObject *self, PyObject *unused) {
    pulsar_consumer_acknowledge_async(cpp_object(self->consumer), self->message, NULL, NULL);
    Py_RETURN_NONE;
}

static PyObject *message_negative_acknowledge(MessageObject *self, PyObject *unused) {
    pulsar_consumer_negative_acknowledge(cpp_object(self->consumer), self->message);
    Py_RETURN_NONE;
}

static PyObject *message_get_consumer(MessageObject *self, void *unused) {
    return Py_NewRef(self->consumer);
}

static PyMethodDef message_methods[] = {
    {"data", (PyCFunction)message_data, METH_NOARGS, "The payload."},
    {"properties", (PyCFunction)message_properties, METH_NOARGS, "A new dict of its properties."},
    {"topic_name", (PyCFunction)message_topic_name, METH_NOARGS, NULL},
    {"contents", (PyCFunction)message_contents, METH_NOARGS,
     "(topic_name(), data(), properties()) at once."},
    {"partition_key", (PyCFunction)message_partition_key, METH_NOARGS, NULL},
    {"redelivery_count", (PyCFunction)message_redelivery_count, METH_NOARGS, NULL},
    {"publish_timestamp", (PyCFunction)message_publish_timestamp, METH_NOARGS, NULL},
    {"event_timestamp", (PyCFunction)message_event_timestamp, METH_NOARGS, NULL},
    {"id_bytes", (PyCFunction)message_id_bytes, METH_NOARGS, "Its id, serialized."},
    {"acknowledge", (PyCFunction)message_acknowledge, METH_NOARGS, NULL},
    {"negative_acknowledge", (PyCFunction)message_negative_acknowledge, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef message_getset[] = {
    {"consumer", (getter)message_get_consumer, NULL, "The _pulsar.Consumer it came from.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject MessageType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_starlight_compiled.Message",
    .tp_basicsize = sizeof(MessageObject),
    .tp_dealloc = (destructor)message_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A message received by a Listener.",
    .tp_methods = message_methods,
    .tp_getset = message_getset,
};

/* ------------------------------------------------------------------------------------------ */
/* Listener: one per TrioConsumer. */

typedef struct {
    PyObject_HEAD
    core_t *core;
} ListenerObject;

static int listener_init(ListenerObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"capacity", "on_ready", NULL};
    long capacity;
    PyObject *on_ready;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "lO", names, &capacity, &on_ready)) return -1;
    if (capacity < 1) {
        PyErr_SetString(PyExc_ValueError, "capacity must be >= 1");
        return -1;
    }
    if (self->core) {
        PyErr_SetString(PyExc_RuntimeError, "Listener already initialized");
        return -1;
    }
    core_t *core = calloc(1, sizeof(core_t));
    if (!core) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_mutex_init(&core->lock, NULL);
    core->capacity = capacity;
    core->low_water = capacity / 2;
    core->on_ready = Py_NewRef(on_ready);
    self->core = core;
    return 0;
}

/* Under the GIL: close (idempotent); returns the queued messages, to be freed by the caller
   outside the lock. */
static void listener_close_core(core_t *core) {
    pthread_mutex_lock(&core->lock);
    int was_closed = core->closed;
    core->closed = 1;
    item_t *items = core->items;
    size_t len = core->len;
    core->items = NULL;
    core->len = core->cap = 0;
    PyObject **consumers = core->consumers;
    int consumers_size = core->consumers_size;
    core->consumers = NULL;
    core->consumers_size = core->tag_count = 0;
    pthread_mutex_unlock(&core->lock);
    if (was_closed) return;
    for (size_t i = 0; i < len; i++) pulsar_message_free(items[i].message);
    free(items);
    for (int i = 0; i < consumers_size; i++) Py_XDECREF(consumers[i]);
    free(consumers);
    Py_CLEAR(core->on_ready);
}

static void listener_dealloc(ListenerObject *self) {
    if (self->core) {
        listener_close_core(self->core);
        bury(self->core);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_open(core_t *core) {
    if (!core) {
        PyErr_SetString(PyExc_RuntimeError, "Listener not initialized");
        return 0;
    }
    if (core->closed) {
        PyErr_SetString(PyExc_RuntimeError, "Listener closed");
        return 0;
    }
    return 1;
}

/* configure(configuration) -> tag: this listener set on a _pulsar.ConsumerConfiguration; the
   consumer subscribed with it is attach()ed under that tag. */
static PyObject *listener_configure(ListenerObject *self, PyObject *configuration) {
    core_t *core = self->core;
    if (!check_open(core)) return NULL;
    pulsar_consumer_configuration_t *native = checked_object(configuration, CONFIGURATION);
    if (!native) return NULL;
    tag_t *tag = calloc(1, sizeof(tag_t));
    if (!tag) return PyErr_NoMemory();
    pthread_mutex_lock(&core->lock);
    int number = core->tag_count;
    if (number >= core->consumers_size) {
        int size = core->consumers_size ? 2 * core->consumers_size : 4;
        PyObject **consumers = realloc(core->consumers, size * sizeof(PyObject *));
        if (!consumers) {
            pthread_mutex_unlock(&core->lock);
            free(tag);
            return PyErr_NoMemory();
        }
        memset(consumers + core->consumers_size, 0,
               (size - core->consumers_size) * sizeof(PyObject *));
        core->consumers = consumers;
        core->consumers_size = size;
    }
    tag->core = core;
    tag->number = number;
    tag->next = core->tags;
    core->tags = tag;
    core->tag_count++;
    pthread_mutex_unlock(&core->lock);
    pulsar_consumer_configuration_set_message_listener(native, on_message, tag);
    return PyLong_FromLong(number);
}

static int valid_tag(core_t *core, int number) {
    if (number < 0 || number >= core->tag_count) {
        PyErr_Format(PyExc_ValueError, "no tag %d", number);
        return 0;
    }
    return 1;
}

/* attach(tag, consumer, topic): messages of that tag come from that _pulsar.Consumer (whose
   C++ object is checked: its topic, read through the C API, must be ``topic``). */
static PyObject *listener_attach(ListenerObject *self, PyObject *args) {
    core_t *core = self->core;
    int number;
    PyObject *consumer;
    const char *topic;
    if (!PyArg_ParseTuple(args, "iOs", &number, &consumer, &topic)) return NULL;
    if (!check_open(core) || !valid_tag(core, number)) return NULL;
    pulsar_consumer_t *native = checked_object(consumer, CONSUMER);
    if (!native) return NULL;
    const char *actual = pulsar_consumer_get_topic(native);
    if (!actual || strcmp(actual, topic) != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "the consumer's C++ object is not where expected (topic %s read as %s)",
                     topic, actual ? actual : "nothing");
        return NULL;
    }
    pthread_mutex_lock(&core->lock);
    PyObject *previous = core->consumers[number];
    core->consumers[number] = Py_NewRef(consumer);
    pthread_mutex_unlock(&core->lock);
    Py_XDECREF(previous);
    Py_RETURN_NONE;
}

/* detach(tag) -> how many queued messages of that tag were dropped; later ones are dropped as
   they come (its consumer closes, or never made it: Pulsar redelivers them). */
static PyObject *listener_detach(ListenerObject *self, PyObject *arg) {
    core_t *core = self->core;
    int number = (int)PyLong_AsLong(arg);
    if (number == -1 && PyErr_Occurred()) return NULL;
    if (!check_open(core) || !valid_tag(core, number)) return NULL;
    size_t kept = 0, dropped_count = 0;
    pthread_mutex_lock(&core->lock);
    pulsar_message_t **dropped = malloc((core->len + 1) * sizeof(pulsar_message_t *));
    if (!dropped) {
        pthread_mutex_unlock(&core->lock);
        return PyErr_NoMemory();
    }
    for (tag_t *tag = core->tags; tag; tag = tag->next)
        if (tag->number == number) tag->detached = 1;
    for (size_t i = 0; i < core->len; i++) {
        if (core->items[i].tag->number == number) {
            dropped[dropped_count++] = core->items[i].message;
        } else {
            core->items[kept++] = core->items[i];
        }
    }
    core->len = kept;
    core->held -= (long)dropped_count;
    PyObject *consumer = core->consumers[number];
    core->consumers[number] = NULL;
    pthread_mutex_unlock(&core->lock);
    for (size_t i = 0; i < dropped_count; i++) pulsar_message_free(dropped[i]);
    free(dropped);
    Py_XDECREF(consumer);
    return PyLong_FromSize_t(dropped_count);
}

/* drain() -> [(consumer, Message)]: everything queued from attached consumers, oldest first;
   messages of a consumer not attached yet stay queued. Re-arms on_ready. */
static PyObject *listener_drain(ListenerObject *self, PyObject *unused) {
    core_t *core = self->core;
    if (!check_open(core)) return NULL;
    pthread_mutex_lock(&core->lock);
    core->wake_pending = 0;
    size_t count = 0;
    for (size_t i = 0; i < core->len; i++)
        if (core->consumers[core->items[i].tag->number]) count++;
    item_t *taken = count ? malloc(count * sizeof(item_t)) : NULL;
    if (count && !taken) {
        pthread_mutex_unlock(&core->lock);
        return PyErr_NoMemory();
    }
    size_t kept = 0, next = 0;
    for (size_t i = 0; i < core->len; i++) {
        if (core->consumers[core->items[i].tag->number]) taken[next++] = core->items[i];
        else core->items[kept++] = core->items[i];
    }
    core->len = kept;
    pthread_mutex_unlock(&core->lock);

    PyObject *result = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; i < count; i++) {
        MessageObject *message = result ? PyObject_New(MessageObject, &MessageType) : NULL;
        if (!message) { /* out of memory: what is left is freed unacknowledged */
            for (size_t j = i; j < count; j++) pulsar_message_free(taken[j].message);
            pthread_mutex_lock(&core->lock);
            core->held -= (long)(count - i);
            pthread_mutex_unlock(&core->lock);
            free(taken);
            Py_XDECREF(result);
            return PyErr_NoMemory();
        }
        PyObject *consumer = core->consumers[taken[i].tag->number];
        message->message = taken[i].message;
        message->consumer = Py_NewRef(consumer);
        PyObject *pair = PyTuple_Pack(2, consumer, (PyObject *)message);
        Py_DECREF(message);
        if (!pair) {
            for (size_t j = i + 1; j < count; j++) pulsar_message_free(taken[j].message);
            free(taken);
            Py_DECREF(result);
            return NULL;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, pair);
    }
    free(taken);
    return result;
}

/* left(count) -> bool: ``count`` messages left Python's buffer (negative: came back). True
   once when the consumers should be resumed: some were paused and the buffer is down to half. */
static PyObject *listener_left(ListenerObject *self, PyObject *arg) {
    core_t *core = self->core;
    long count = PyLong_AsLong(arg);
    if (count == -1 && PyErr_Occurred()) return NULL;
    if (!core) Py_RETURN_FALSE;
    int resume = 0;
    pthread_mutex_lock(&core->lock);
    core->held -= count;
    if (core->held < 0) core->held = 0;
    if (core->full && core->held <= core->low_water && !core->closed) {
        core->full = 0;
        resume = 1;
    }
    pthread_mutex_unlock(&core->lock);
    return PyBool_FromLong(resume);
}

/* close(): queued messages freed unacknowledged; later listener calls drop theirs. */
static PyObject *listener_close(ListenerObject *self, PyObject *unused) {
    if (self->core) listener_close_core(self->core);
    Py_RETURN_NONE;
}

static PyObject *listener_get_full(ListenerObject *self, void *unused) {
    if (!self->core) Py_RETURN_FALSE;
    pthread_mutex_lock(&self->core->lock);
    int full = self->core->full;
    pthread_mutex_unlock(&self->core->lock);
    return PyBool_FromLong(full);
}

static PyObject *listener_get_queued(ListenerObject *self, void *unused) {
    if (!self->core) return PyLong_FromLong(0);
    pthread_mutex_lock(&self->core->lock);
    size_t len = self->core->len;
    pthread_mutex_unlock(&self->core->lock);
    return PyLong_FromSize_t(len);
}

static PyMethodDef listener_methods[] = {
    {"configure", (PyCFunction)listener_configure, METH_O, NULL},
    {"attach", (PyCFunction)listener_attach, METH_VARARGS, NULL},
    {"detach", (PyCFunction)listener_detach, METH_O, NULL},
    {"drain", (PyCFunction)listener_drain, METH_NOARGS, NULL},
    {"left", (PyCFunction)listener_left, METH_O, NULL},
    {"close", (PyCFunction)listener_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef listener_getset[] = {
    {"full", (getter)listener_get_full, NULL, "Consumers were paused since the last resume.", NULL},
    {"queued", (getter)listener_get_queued, NULL, "Messages queued here, not drained.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject ListenerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_starlight_compiled.Listener",
    .tp_basicsize = sizeof(ListenerObject),
    .tp_dealloc = (destructor)listener_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Listener(capacity, on_ready): a C message listener for one TrioConsumer.",
    .tp_methods = listener_methods,
    .tp_getset = listener_getset,
    .tp_init = (initproc)listener_init,
    .tp_new = PyType_GenericNew,
};

