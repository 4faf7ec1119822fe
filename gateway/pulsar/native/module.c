/* _starlight_compiled: the per-message calls into pulsar-client, in C, for
   gateway/pulsar/consumer.py (listener.c: Listener, Message) and gateway/pulsar/producer.py
   (sender.c: Sender, Outgoing; doorbell.c: Doorbell); gateway/pulsar/compiled.py builds and
   loads it (docs/pulsar-layer.md). This file: the checks every entry point makes, the wake-up
   of Python from a C++ thread (the listener's), and the module.

   pulsar-client's Python binding calls a Python message listener with the GIL for every
   message, and every accessor and acknowledgement afterwards is a pybind11 call (ack: one more
   GIL hand-off for its result callback); every send is four pybind11 calls to build the message
   and one to send it. Measured (docs/performance.md, "Issue 16: PerfTest's load straight onto
   Pulsar"): ~20 µs of CPU per message of those crossings, on a 2-core VM.

   The C API's handles are structs holding exactly one C++ object (pulsar-client-cpp,
   lib/c/c_structs.h), and pybind11 keeps the address of an instance's C++ object right after
   its Python header (gateway/pulsar/native_objects.py): that address is a valid handle.
   compiled.py checks that layout for every class read here (ConsumerConfiguration, Consumer,
   Producer: native_objects.layout_problem, then a value read back through the C API) before
   using this module, and ``attach`` checks every consumer (its topic read back). */
#include "common.h"

/* The binding's classes whose objects Python passes in (bind_types): anything else would be
   read as someone else's memory, so every entry point checks first. */
static PyObject *bound_types[KINDS];
static const char *kind_names[KINDS] = {"_pulsar.ConsumerConfiguration", "_pulsar.Consumer",
                                        "_pulsar.Producer"};

void *checked_object(PyObject *instance, int kind) {
    PyObject *type = bound_types[kind];
    if (!type) {
        PyErr_SetString(PyExc_RuntimeError, "bind_types() was not called");
        return NULL;
    }
    int is = PyObject_IsInstance(instance, type);
    if (is < 0) return NULL;
    if (!is) {
        PyErr_Format(PyExc_TypeError, "expected a %s, not %.100s", kind_names[kind],
                     Py_TYPE(instance)->tp_name);
        return NULL;
    }
    void *object = cpp_object(instance);
    if (!object) PyErr_Format(PyExc_RuntimeError, "the %s holds no C++ object", kind_names[kind]);
    return object;
}

int room_for_one(void **items, size_t *cap, size_t len, size_t size) {
    if (len < *cap) return 1;
    size_t grown = *cap ? 2 * *cap : 64;
    void *more = realloc(*items, grown * size);
    if (!more) return 0;
    *items = more;
    *cap = grown;
    return 1;
}

/* A C++ thread keeps its Python thread state (as bridge.keep_thread_state does for
   pulsar-client's Python callbacks): one PyGILState reference taken and never released. */
static __thread int thread_state_kept;

void wake_python(PyObject **slot) {
    if (interpreter_finalizing()) return;
    PyGILState_STATE state = PyGILState_Ensure();
    if (!thread_state_kept) {
        thread_state_kept = 1;
        PyGILState_Ensure();
    }
    PyObject *on_ready = *slot;
    if (on_ready) {
        Py_INCREF(on_ready);
        PyObject *result = PyObject_CallNoArgs(on_ready);
        if (result) Py_DECREF(result);
        else PyErr_Clear(); /* on_ready must not raise (bridge.TrioWaker.wake does not) */
        Py_DECREF(on_ready);
    }
    PyGILState_Release(state);
}

/* receiver_queue_size(configuration) -> int, read through the C API: compiled.py's
   check that a configuration's C++ object is where this module looks for it. */
static PyObject *receiver_queue_size(PyObject *module, PyObject *configuration) {
    pulsar_consumer_configuration_t *native = checked_object(configuration, CONFIGURATION);
    if (!native) return NULL;
    return PyLong_FromLong(pulsar_consumer_configuration_get_receiver_queue_size(native));
}

/* producer_topic(producer) -> str: a _pulsar.Producer's topic read through the C API, which
   TrioProducer compares with the binding's before sending through it. */
static PyObject *producer_topic(PyObject *module, PyObject *producer) {
    pulsar_producer_t *native = checked_object(producer, PRODUCER);
    if (!native) return NULL;
    const char *topic = pulsar_producer_get_topic(native);
    return PyUnicode_FromString(topic ? topic : "");
}

/* consumer_topic(consumer) -> str: a _pulsar.Consumer's topic read through the C API:
   compiled.py's check that a consumer's C++ object is where this module looks for it. */
static PyObject *consumer_topic(PyObject *module, PyObject *consumer) {
    pulsar_consumer_t *native = checked_object(consumer, CONSUMER);
    if (!native) return NULL;
    const char *topic = pulsar_consumer_get_topic(native);
    return PyUnicode_FromString(topic ? topic : "");
}

/* bind_types(configuration_type, consumer_type, producer_type): the binding's classes. */
static PyObject *bind_types(PyObject *module, PyObject *args) {
    PyObject *types[KINDS];
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyType_Type, &types[0], &PyType_Type, &types[1],
                          &PyType_Type, &types[2]))
        return NULL;
    for (int i = 0; i < KINDS; i++) Py_XSETREF(bound_types[i], Py_NewRef(types[i]));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"receiver_queue_size", receiver_queue_size, METH_O, NULL},
    {"producer_topic", producer_topic, METH_O, NULL},
    {"consumer_topic", consumer_topic, METH_O, NULL},
    {"bind_types", bind_types, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_starlight_compiled",
                                        "The per-message calls into pulsar-client, in C (gateway/pulsar/compiled.py).", -1,
                                        module_methods};

PyMODINIT_FUNC PyInit__starlight_compiled(void) {
    if (PyType_Ready(&MessageType) < 0 || PyType_Ready(&ListenerType) < 0 ||
        PyType_Ready(&SenderType) < 0 || PyType_Ready(&OutgoingType) < 0 ||
        PyType_Ready(&DoorbellType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    if (PyModule_AddObjectRef(module, "Message", (PyObject *)&MessageType) < 0 ||
        PyModule_AddObjectRef(module, "Listener", (PyObject *)&ListenerType) < 0 ||
        PyModule_AddObjectRef(module, "Sender", (PyObject *)&SenderType) < 0 ||
        PyModule_AddObjectRef(module, "Outgoing", (PyObject *)&OutgoingType) < 0 ||
        PyModule_AddObjectRef(module, "Doorbell", (PyObject *)&DoorbellType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
