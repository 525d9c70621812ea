/* ks_event.h: the fixed-size record every decoded trace message becomes. */
#ifndef KS_EVENT_H
#define KS_EVENT_H

#include <stdint.h>

/* X(ENUM, "atom the VM sends") — the order is the order of the stats map. */
#define KS_EVENT_KINDS(X)                                       \
  X(CALL, "call")                                               \
  X(RETURN_FROM, "return_from")                                 \
  X(EXCEPTION_FROM, "exception_from")                           \
  X(RETURN_TO, "return_to")                                     \
  X(IN, "in")                                                   \
  X(OUT, "out")                                                 \
  X(IN_EXITING, "in_exiting")                                   \
  X(OUT_EXITING, "out_exiting")                                 \
  X(OUT_EXITED, "out_exited")                                   \
  X(SPAWN, "spawn")                                             \
  X(SPAWNED, "spawned")                                         \
  X(EXIT, "exit")                                               \
  X(LINK, "link")                                               \
  X(UNLINK, "unlink")                                           \
  X(GETTING_LINKED, "getting_linked")                           \
  X(GETTING_UNLINKED, "getting_unlinked")                       \
  X(REGISTER, "register")                                       \
  X(UNREGISTER, "unregister")                                   \
  X(SEND, "send")                                               \
  X(SEND_TO_NON_EXISTING_PROCESS, "send_to_non_existing_process") \
  X(RECEIVE, "receive")                                         \
  X(GC_MINOR_START, "gc_minor_start")                           \
  X(GC_MINOR_END, "gc_minor_end")                               \
  X(GC_MAJOR_START, "gc_major_start")                           \
  X(GC_MAJOR_END, "gc_major_end")                               \
  X(GC_MAX_HEAP_SIZE, "gc_max_heap_size")                       \
  X(OPEN, "open")                                               \
  X(CLOSED, "closed")                                           \
  X(SEQ_TRACE, "seq_trace")

typedef enum ks_event_kind {
#define KS_X_ENUM(e, s) KS_EV_##e,
  KS_EVENT_KINDS(KS_X_ENUM)
#undef KS_X_ENUM
  KS_EV__COUNT
} ks_event_kind;

extern const char *const ks_event_kind_names[KS_EV__COUNT];

/* ks_event.flags */
enum {
  KS_EVF_TS = 1,       /* ts is set */
  KS_EVF_WALL = 2,     /* ts came from {Mega,Sec,Micro}: ns since the epoch */
  KS_EVF_LABEL = 4,    /* label is set */
  KS_EVF_CALLER = 8,   /* caller is set */
  KS_EVF_PORT = 16,    /* the traced entity is a port */
  KS_EVF_TOKEN = 32,   /* the call carried a seq_trace token field ([] or a token) */
  KS_EVF_META = 64     /* from a meta tracer (a flame capture's trigger); a port
                        * tracer's meta events are the ones with KS_EVF_WALL */
};

/*
 * 32 bytes. Ids index the sink's intern tables (KS_NONE when absent):
 * pid/other in the pid table, mfa/caller in the MFA table, name in the term
 * table (register/unregister). A seq_trace label is not interned (labels of
 * requests are many and short-lived): KS_EVF_LABEL says the decoder saw one.
 */
typedef struct ks_event {
  uint8_t kind;
  uint8_t flags;
  uint16_t reserved;
  uint32_t pid;
  uint32_t mfa;
  uint32_t other;
  uint32_t caller;
  uint32_t name;
  int64_t ts;
} ks_event;

#endif
