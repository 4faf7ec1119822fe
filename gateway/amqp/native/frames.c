/* _starlight_frames: the per-message frames of a socket read, taken in C
   (gateway/amqp/compiled.py builds and loads it; gateway/amqp/connection.py calls it).

   A read from a publisher holds tens of Basic.Publish + content header + body triples, one
   from a consumer tens of Basic.Acks. The Python path takes each frame through the frame
   reader, the connection's dispatch, the channel's content assembly and a decoder of its own
   (~6 % of the gateway's CPU under PerfTest, issue 16). ``scan`` does that work for the frames
   that need no judgement and hands the connection the same events the Python path builds:

   * a Basic.Ack of 13 octets on an open channel that is not in the middle of a message
     becomes an ``AckReceived``;
   * a Basic.Publish (immediate=false, UTF-8 names, exact length) on such a channel whose
     content header (class 60, weight 0, a body size within the channel's max_message_size,
     a well-formed property list: ``valid_property_list``, the same check as
     ``properties.validate_properties``) and every body frame (the same channel, none larger
     than what is left) are in the buffer becomes a ``PublishReceived``.

   It stops at the first frame that is anything else, that is not whole yet, or that is
   malformed in any way, without taking any frame of a message it cannot take whole, and
   returns where it stopped: the Python path takes that frame next, so every refusal, every
   reply code and every partial message is the Python path's (AMQP 0-9-1 §4.2.3, §4.2.6). The
   two paths produce the same events from the same bytes: tests/unit/amqp/test_compiled.py
   checks that on generated streams cut at every point, and the connection tests run both. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FRAME_METHOD 1
#define FRAME_HEADER 2
#define FRAME_BODY 3
#define FRAME_END 0xCE
#define FRAME_HEADER_SIZE 7
#define BASIC_CLASS 60
#define BASIC_PUBLISH 0x003C0028u
#define BASIC_ACK 0x003C0050u
/* class id, weight, body size: the content header's fixed part (§4.2.6.1). */
#define CONTENT_HEADER_PREFIX 12

/* What configure() gave: the event classes and the channel's open state. */
static PyObject *publish_type, *ack_type, *channel_open;
static PyObject *empty_tuple;
static PyObject *name_state, *name_in_content, *name_max_message_size;
static PyObject *name_channel, *name_exchange, *name_routing_key, *name_mandatory,
    *name_immediate, *name_header, *name_body, *name_delivery_tag, *name_multiple;

/* The exchange, routing key and property list repeat publish after publish: the last of each
   is kept, so a repeat costs a memcmp instead of a new object (and the property list's hash,
   kept by the bytes object, is computed once). */
typedef struct {
    PyObject *value;
    char bytes[256];
    Py_ssize_t size;
} memo_t;
static memo_t memo_exchange, memo_routing_key;
static PyObject *memo_header;

static inline uint32_t be16(const unsigned char *p) { return ((uint32_t)p[0] << 8) | p[1]; }

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p) {
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

typedef struct {
    int type;
    uint32_t channel;
    Py_ssize_t start; /* of the payload */
    Py_ssize_t size;
} frame_t;

/* Whether a whole frame of at most max_payload octets with its frame-end octet starts at pos;
   the type is the caller's to check. */
static int whole_frame(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos,
                       Py_ssize_t max_payload, frame_t *frame) {
    if (len - pos < FRAME_HEADER_SIZE) return 0;
    const unsigned char *p = buf + pos;
    uint32_t size = be32(p + 3);
    if ((uint64_t)size > (uint64_t)max_payload) return 0;
    if (len - pos - FRAME_HEADER_SIZE - 1 < (Py_ssize_t)size) return 0;
    if (p[FRAME_HEADER_SIZE + size] != FRAME_END) return 0;
    frame->type = p[0];
    frame->channel = be16(p + 1);
    frame->start = pos + FRAME_HEADER_SIZE;
    frame->size = size;
    return 1;
}

static inline Py_ssize_t after(const frame_t *frame) { return frame->start + frame->size + 1; }

/* The channel object if a method on it may be taken here: open (not closing after our
   Channel.Close) and not between a Basic.Publish and its last body frame. A borrowed
   reference, NULL if not (-1 in *failed on a Python error). */
static PyObject *fast_channel(PyObject *channels, uint32_t number, int *failed) {
    PyObject *key = PyLong_FromUnsignedLong(number);
    if (!key) goto error;
    PyObject *channel = PyDict_GetItemWithError(channels, key);
    Py_DECREF(key);
    if (!channel) {
        if (PyErr_Occurred()) goto error;
        return NULL;
    }
    PyObject *state = PyObject_GetAttr(channel, name_state);
    if (!state) goto error;
    int open = state == channel_open;
    Py_DECREF(state);
    if (!open) return NULL;
    PyObject *in_content = PyObject_GetAttr(channel, name_in_content);
    if (!in_content) goto error;
    int busy = PyObject_IsTrue(in_content);
    Py_DECREF(in_content);
    if (busy < 0) goto error;
    return busy ? NULL : channel;
error:
    *failed = 1;
    return NULL;
}

/* A new reference to the str of these UTF-8 octets (the memo's if they repeat); NULL with no
   error set if they are not valid UTF-8, NULL with an error on a Python failure. */
static PyObject *memo_str(memo_t *memo, const unsigned char *octets, Py_ssize_t size) {
    if (memo->value && memo->size == size && memcmp(memo->bytes, octets, size) == 0)
        return Py_NewRef(memo->value);
    PyObject *value = PyUnicode_DecodeUTF8((const char *)octets, size, NULL);
    if (!value) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
        return NULL;
    }
    Py_XSETREF(memo->value, Py_NewRef(value));
    memcpy(memo->bytes, octets, size); /* a short string: at most 255 octets */
    memo->size = size;
    return value;
}

/* ------------------------------------------------- the property list's structure (§4.2.6.1)

   The same check as properties.validate_properties and fieldtable.skip_table, step for step:
   lengths and types only, so that decoding the list later cannot fail; anything it refuses is
   left to the Python path, which refuses it with its own words. -1: malformed. */
#define MAX_DEPTH 64 /* fieldtable.MAX_DEPTH */

static int fixed_size(unsigned char tag) { /* fieldtable._FIXED_SIZES; -1: not fixed */
    switch (tag) {
    case 'V': return 0;
    case 't': case 'b': case 'B': return 1;
    case 's': case 'u': return 2;
    case 'I': case 'i': case 'f': return 4;
    case 'D': return 5;
    case 'l': case 'L': case 'T': case 'd': return 8;
    default: return -1;
    }
}

static Py_ssize_t skip_value(const unsigned char *buf, Py_ssize_t offset, Py_ssize_t end,
                             int depth);

/* A long-string length at offset, or -1 if its four octets are not all there. */
static Py_ssize_t read_long(const unsigned char *buf, Py_ssize_t offset, Py_ssize_t end) {
    return offset + 4 > end ? -1 : (Py_ssize_t)be32(buf + offset);
}

static Py_ssize_t skip_table(const unsigned char *buf, Py_ssize_t offset, Py_ssize_t end,
                             int depth) {
    Py_ssize_t length = read_long(buf, offset, end);
    if (length < 0) return -1;
    offset += 4;
    Py_ssize_t stop = offset + length;
    if (stop > end) return -1;
    while (offset < stop) {
        offset += 1 + buf[offset]; /* the key, a short string */
        if (offset > stop) return -1;
        offset = skip_value(buf, offset, stop, depth);
        if (offset < 0) return -1;
    }
    return stop;
}

static Py_ssize_t skip_value(const unsigned char *buf, Py_ssize_t offset, Py_ssize_t end,
                             int depth) {
    if (offset >= end) return -1;
    unsigned char tag = buf[offset++];
    int size = fixed_size(tag);
    if (size >= 0) return offset + size > end ? -1 : offset + size;
    if (tag == 'S' || tag == 'x') {
        Py_ssize_t length = read_long(buf, offset, end);
        if (length < 0 || offset + 4 + length > end) return -1;
        return offset + 4 + length;
    }
    if (depth >= MAX_DEPTH) return -1;
    if (tag == 'F') return skip_table(buf, offset, end, depth + 1);
    if (tag == 'A') {
        Py_ssize_t length = read_long(buf, offset, end);
        if (length < 0 || offset + 4 + length > end) return -1;
        Py_ssize_t stop = offset + 4 + length;
        offset += 4;
        while (offset < stop) {
            offset = skip_value(buf, offset, stop, depth + 1);
            if (offset < 0) return -1;
        }
        return stop;
    }
    return -1;
}

enum { SHORTSTR, OCTET, TABLE, TIMESTAMP };
/* Basic's 14 properties, from flag bit 15 down to bit 2 (properties._SPEC). */
static const unsigned char property_kinds[14] = {
    SHORTSTR, SHORTSTR, TABLE,    OCTET,    OCTET,    SHORTSTR, SHORTSTR,
    SHORTSTR, SHORTSTR, TIMESTAMP, SHORTSTR, SHORTSTR, SHORTSTR, SHORTSTR};

/* Property flags (with continuation words, none of which may set a flag: Basic has 14) and
   the property list. */
static int valid_property_list(const unsigned char *raw, Py_ssize_t end) {
    if (end < 2) return 0;
    uint32_t flags = be16(raw), word = flags;
    Py_ssize_t offset = 2;
    while (word & 1) {
        if (offset + 2 > end) return 0;
        word = be16(raw + offset);
        offset += 2;
        if (word & 0xFFFE) return 0;
    }
    for (int i = 0; i < 14; i++) {
        if (!(flags & (1u << (15 - i)))) continue;
        switch (property_kinds[i]) {
        case SHORTSTR:
            if (offset >= end) return 0;
            offset += 1 + raw[offset];
            break;
        case OCTET: offset += 1; break;
        case TIMESTAMP: offset += 8; break;
        default:
            offset = skip_table(raw, offset, end, 0);
            if (offset < 0) return 0;
        }
    }
    return offset == end;
}

/* A new reference to the property list as bytes if it is well formed (the memo's if it
   repeats); NULL with no error set if not: that publish is left to the Python path. */
static PyObject *checked_header(const unsigned char *octets, Py_ssize_t size) {
    if (memo_header && PyBytes_GET_SIZE(memo_header) == size &&
        memcmp(PyBytes_AS_STRING(memo_header), octets, size) == 0)
        return Py_NewRef(memo_header);
    if (!valid_property_list(octets, size)) return NULL;
    PyObject *header = PyBytes_FromStringAndSize((const char *)octets, size);
    if (!header) return NULL;
    Py_XSETREF(memo_header, Py_NewRef(header));
    return header;
}

/* valid_properties(raw: bytes) -> bool: the check above, for the tests that hold it to
   properties.validate_properties. */
static PyObject *valid_properties(PyObject *module, PyObject *raw) {
    Py_buffer view;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0) return NULL;
    int valid = valid_property_list(view.buf, view.len);
    PyBuffer_Release(&view);
    return PyBool_FromLong(valid);
}

static int set_fields(PyObject *event, PyObject *const *names, PyObject *const *values,
                      int count) {
    /* object.__setattr__: the event classes are frozen dataclasses. */
    for (int i = 0; i < count; i++)
        if (PyObject_GenericSetAttr(event, names[i], values[i]) < 0) return -1;
    return 0;
}

static PyObject *new_event(PyObject *type) {
    return PyBaseObject_Type.tp_new((PyTypeObject *)type, empty_tuple, NULL);
}

/* Basic.Ack (§1.8.3.13): delivery-tag(8) multiple(bit), after the method id. */
static PyObject *ack_event(uint32_t channel, const unsigned char *payload) {
    PyObject *event = new_event(ack_type);
    if (!event) return NULL;
    PyObject *number = PyLong_FromUnsignedLong(channel);
    PyObject *tag = PyLong_FromUnsignedLongLong(be64(payload + 4));
    if (!number || !tag) goto error;
    PyObject *names[] = {name_channel, name_delivery_tag, name_multiple};
    PyObject *values[] = {number, tag, (payload[12] & 1) ? Py_True : Py_False};
    if (set_fields(event, names, values, 3) < 0) goto error;
    Py_DECREF(number);
    Py_DECREF(tag);
    return event;
error:
    Py_XDECREF(number);
    Py_XDECREF(tag);
    Py_DECREF(event);
    return NULL;
}

/* The publish whose method frame is `method` on `channel`: 1 and *next set past its last
   frame with the event appended, 0 if it is not for this path (nothing taken), -1 on a
   Python error. */
static int take_publish(const unsigned char *buf, Py_ssize_t len, Py_ssize_t max_payload,
                        const frame_t *method, PyObject *channel, PyObject *events,
                        Py_ssize_t *next) {
    /* Basic.Publish (§1.8.3.7): ticket(2) exchange(shortstr) routing-key(shortstr) bits. */
    const unsigned char *p = buf + method->start;
    Py_ssize_t size = method->size;
    if (size < 9) return 0;
    Py_ssize_t exchange_stop = 7 + p[6];
    if (exchange_stop >= size) return 0;
    Py_ssize_t key_stop = exchange_stop + 1 + p[exchange_stop];
    if (key_stop + 1 != size) return 0;
    unsigned char bits = p[key_stop];
    if (bits & 2) return 0; /* immediate: the Python path refuses it (540) */

    frame_t header;
    if (!whole_frame(buf, len, after(method), max_payload, &header)) return 0;
    if (header.type != FRAME_HEADER || header.channel != method->channel) return 0;
    if (header.size < CONTENT_HEADER_PREFIX + 2) return 0;
    const unsigned char *h = buf + header.start;
    if (be16(h) != BASIC_CLASS || be16(h + 2) != 0) return 0;
    uint64_t body_size = be64(h + 4);
    PyObject *limit = PyObject_GetAttr(channel, name_max_message_size);
    if (!limit) return -1;
    unsigned long long max_message_size = PyLong_AsUnsignedLongLong(limit);
    Py_DECREF(limit);
    if (max_message_size == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (body_size > max_message_size) return 0;

    /* Every body frame, the same channel, none larger than what is left (§4.2.6.2). */
    Py_ssize_t end = after(&header);
    Py_ssize_t first_body = -1;
    int body_frames = 0;
    uint64_t left = body_size;
    while (left > 0) {
        frame_t body;
        if (!whole_frame(buf, len, end, max_payload, &body)) return 0;
        if (body.type != FRAME_BODY || body.channel != method->channel) return 0;
        if ((uint64_t)body.size > left) return 0;
        if (first_body < 0) first_body = body.start;
        body_frames++;
        left -= body.size;
        end = after(&body);
    }

    /* All there and well formed: build the event. */
    PyObject *exchange = NULL, *routing_key = NULL, *raw = NULL, *body = NULL, *number = NULL,
             *event = NULL;
    int taken = -1;
    exchange = memo_str(&memo_exchange, p + 7, exchange_stop - 7);
    if (!exchange) goto done_or_skip;
    routing_key = memo_str(&memo_routing_key, p + exchange_stop + 1, key_stop - exchange_stop - 1);
    if (!routing_key) goto done_or_skip;
    raw = checked_header(h + CONTENT_HEADER_PREFIX, header.size - CONTENT_HEADER_PREFIX);
    if (!raw) goto done_or_skip;
    if (body_frames <= 1) {
        body = PyBytes_FromStringAndSize(body_frames ? (const char *)buf + first_body : NULL,
                                         (Py_ssize_t)body_size);
    } else {
        body = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)body_size);
        if (body) {
            char *out = PyBytes_AS_STRING(body);
            Py_ssize_t at = after(&header);
            for (int i = 0; i < body_frames; i++) {
                frame_t piece;
                whole_frame(buf, len, at, max_payload, &piece); /* checked above */
                memcpy(out, buf + piece.start, piece.size);
                out += piece.size;
                at = after(&piece);
            }
        }
    }
    if (!body) goto done;
    number = PyLong_FromUnsignedLong(method->channel);
    if (!number) goto done;
    event = new_event(publish_type);
    if (!event) goto done;
    PyObject *names[] = {name_channel, name_exchange,  name_routing_key, name_mandatory,
                         name_immediate, name_header, name_body};
    PyObject *values[] = {number, exchange, routing_key, (bits & 1) ? Py_True : Py_False,
                          Py_False, raw, body};
    if (set_fields(event, names, values, 7) < 0 || PyList_Append(events, event) < 0) goto done;
    *next = end;
    taken = 1;
    goto done;
done_or_skip:
    /* Not valid UTF-8, or a malformed property list: the Python path's publish. */
    taken = PyErr_Occurred() ? -1 : 0;
done:
    Py_XDECREF(exchange);
    Py_XDECREF(routing_key);
    Py_XDECREF(raw);
    Py_XDECREF(body);
    Py_XDECREF(number);
    Py_XDECREF(event);
    return taken;
}

/* scan(buffer, pos, max_payload, channels, events) -> int: take the frames from `pos` on
   that this path takes (see the top of this file), appending their events to `events`; the
   position of the first frame not taken. On a Python error (memory) nothing is taken. */
static PyObject *scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "scan(buffer, pos, max_payload, channels, events)");
        return NULL;
    }
    if (!publish_type) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *channels = args[3], *events = args[4];
    if (!PyDict_Check(channels) || !PyList_Check(events)) {
        PyErr_SetString(PyExc_TypeError, "channels must be a dict and events a list");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t max_payload = PyLong_AsSsize_t(args[2]);
    if ((start == -1 || max_payload == -1) && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t len = view.len;
    if (start < 0 || start > len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos is outside the buffer");
        return NULL;
    }
    Py_ssize_t events_before = PyList_GET_SIZE(events);
    Py_ssize_t pos = start;
    int failed = 0;
    for (;;) {
        frame_t frame;
        if (!whole_frame(buf, len, pos, max_payload, &frame)) break;
        if (frame.type != FRAME_METHOD || frame.channel == 0 || frame.size < 4) break;
        PyObject *channel = fast_channel(channels, frame.channel, &failed);
        if (!channel) break;
        uint32_t method = be32(buf + frame.start);
        if (method == BASIC_ACK) {
            if (frame.size != 13) break;
            PyObject *event = ack_event(frame.channel, buf + frame.start);
            if (!event) {
                failed = 1;
                break;
            }
            int appended = PyList_Append(events, event);
            Py_DECREF(event);
            if (appended < 0) {
                failed = 1;
                break;
            }
            pos = after(&frame);
        } else if (method == BASIC_PUBLISH) {
            Py_ssize_t next = pos;
            int taken = take_publish(buf, len, max_payload, &frame, channel, events, &next);
            if (taken < 0) failed = 1;
            if (taken <= 0) break;
            pos = next;
        } else {
            break;
        }
    }
    PyBuffer_Release(&view);
    if (failed) {
        /* Give back what was taken: the caller's position stays where it was. */
        PyList_SetSlice(events, events_before, PyList_GET_SIZE(events), NULL);
        return NULL;
    }
    return PyLong_FromSsize_t(pos);
}

/* configure(publish_type, ack_type, channel_open) */
static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *publish, *ack, *open;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyType_Type, &publish, &PyType_Type, &ack, &open))
        return NULL;
    Py_XSETREF(publish_type, Py_NewRef(publish));
    Py_XSETREF(ack_type, Py_NewRef(ack));
    Py_XSETREF(channel_open, Py_NewRef(open));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL, NULL},
    {"configure", configure, METH_VARARGS, NULL},
    {"valid_properties", valid_properties, METH_O, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_starlight_frames",
    "The per-message frames of a socket read, in C (gateway/amqp/compiled.py).", -1,
    module_methods};

static int intern_names(void) {
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {{&name_state, "state"},
                 {&name_in_content, "in_content"},
                 {&name_max_message_size, "max_message_size"},
                 {&name_channel, "channel"},
                 {&name_exchange, "exchange"},
                 {&name_routing_key, "routing_key"},
                 {&name_mandatory, "mandatory"},
                 {&name_immediate, "immediate"},
                 {&name_header, "header"},
                 {&name_body, "body"},
                 {&name_delivery_tag, "delivery_tag"},
                 {&name_multiple, "multiple"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        *names[i].slot = PyUnicode_InternFromString(names[i].text);
        if (!*names[i].slot) return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__starlight_frames(void) {
    if (!empty_tuple && !(empty_tuple = PyTuple_New(0))) return NULL;
    if (intern_names() < 0) return NULL;
    return PyModule_Create(&module_def);
}
