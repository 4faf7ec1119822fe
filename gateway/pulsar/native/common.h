/* What the compiled module's files share (gateway/pulsar/native/): Pulsar's C API, how a
   binding object's C++ object is found and checked, and how Python is woken from a C++ thread. */
#ifndef STARLIGHT_NATIVE_COMMON_H
#define STARLIGHT_NATIVE_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Pulsar's C API, as in pulsar-client-cpp's include/pulsar/c/ (the wheel ships no headers). */
typedef struct _pulsar_producer pulsar_producer_t;
typedef struct _pulsar_consumer pulsar_consumer_t;
typedef struct _pulsar_consumer_configuration pulsar_consumer_configuration_t;
typedef struct _pulsar_message pulsar_message_t;
typedef struct _pulsar_message_id pulsar_message_id_t;
typedef struct _pulsar_string_map pulsar_string_map_t;
typedef int pulsar_result;
typedef void (*pulsar_message_listener)(pulsar_consumer_t *, pulsar_message_t *, void *);
typedef void (*pulsar_result_callback)(pulsar_result, void *);
typedef void (*pulsar_send_callback)(pulsar_result, pulsar_message_id_t *, void *);

void pulsar_consumer_configuration_set_message_listener(pulsar_consumer_configuration_t *,
                                                        pulsar_message_listener, void *);
int pulsar_consumer_configuration_get_receiver_queue_size(pulsar_consumer_configuration_t *);
const char *pulsar_consumer_get_topic(pulsar_consumer_t *);
pulsar_result pulsar_consumer_pause_message_listener(pulsar_consumer_t *);
void pulsar_consumer_acknowledge_async(pulsar_consumer_t *, pulsar_message_t *,
                                       pulsar_result_callback, void *);
void pulsar_consumer_negative_acknowledge(pulsar_consumer_t *, pulsar_message_t *);
void pulsar_producer_send_async(pulsar_producer_t *, pulsar_message_t *, pulsar_send_callback,
                                void *);
void pulsar_producer_flush_async(pulsar_producer_t *, pulsar_result_callback, void *);
pulsar_message_t *pulsar_message_create(void);
void pulsar_message_set_content(pulsar_message_t *, const void *, size_t);
void pulsar_message_set_property(pulsar_message_t *, const char *, const char *);
void pulsar_message_free(pulsar_message_t *);
const void *pulsar_message_get_data(pulsar_message_t *);
uint32_t pulsar_message_get_length(pulsar_message_t *);
pulsar_string_map_t *pulsar_message_get_properties(pulsar_message_t *);
const char *pulsar_message_get_topic_name(pulsar_message_t *);
const char *pulsar_message_get_partitionKey(pulsar_message_t *);
int pulsar_message_get_redelivery_count(pulsar_message_t *);
uint64_t pulsar_message_get_publish_timestamp(pulsar_message_t *);
uint64_t pulsar_message_get_event_timestamp(pulsar_message_t *);
pulsar_message_id_t *pulsar_message_get_message_id(pulsar_message_t *);
void *pulsar_message_id_serialize(pulsar_message_id_t *, int *);
void pulsar_message_id_free(pulsar_message_id_t *);
int pulsar_string_map_size(pulsar_string_map_t *);
const char *pulsar_string_map_get_key(pulsar_string_map_t *, int);
const char *pulsar_string_map_get_value(pulsar_string_map_t *, int);
void pulsar_string_map_free(pulsar_string_map_t *);
const char *pulsar_producer_get_topic(pulsar_producer_t *);

#if PY_VERSION_HEX >= 0x030D0000
#define interpreter_finalizing() Py_IsFinalizing()
#else
#define interpreter_finalizing() _Py_IsFinalizing()
#endif

/* The C++ object a pybind11 instance of the binding holds (native_objects.cpp_address). */
static inline void *cpp_object(PyObject *instance) { return ((void **)instance)[2]; }

/* The binding's classes whose objects Python passes in (module.c, bind_types). */
enum { CONFIGURATION, CONSUMER, PRODUCER, KINDS };

/* ``instance``'s C++ object once it is checked to be of the binding's class ``kind``; NULL
   with a Python exception otherwise. */
void *checked_object(PyObject *instance, int kind);

/* Room for one more item in the growing array ``*items`` of ``*cap`` items of ``size`` bytes,
   ``len`` of them used (the caller holds the array's lock): 0 when memory ran out. */
int room_for_one(void **items, size_t *cap, size_t len, size_t size);

/* Call the Python callable in ``*slot`` (if any: a closed object's is NULL), from any thread,
   with or without the GIL. */
void wake_python(PyObject **slot);

/* doorbell.c: what rings a Doorbell. ``release`` drops the reference its ring took; both
   members are read by ``take`` with the GIL. */
typedef struct ringer {
    PyObject *on_ready; /* (GIL) NULL once closed */
    void (*release)(struct ringer *);
} ringer_t;
typedef struct doorbell doorbell_t;

/* The Doorbell object's bell (a borrowed pointer), or NULL with a TypeError. */
doorbell_t *doorbell_of(PyObject *object);
void doorbell_retain(doorbell_t *bell);
void doorbell_release(doorbell_t *bell);
/* Any thread, no GIL: put ``ringer`` (holding a reference for the bell) on the bell's list
   and wake the trio side; 0 when memory ran out (nothing done). */
int doorbell_ring(doorbell_t *bell, ringer_t *ringer);

extern PyTypeObject MessageType, ListenerType; /* listener.c */
extern PyTypeObject SenderType, OutgoingType;  /* sender.c */
extern PyTypeObject DoorbellType;              /* doorbell.c */

#endif
