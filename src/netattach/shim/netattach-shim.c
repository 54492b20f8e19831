/*
 * netattach-shim: the CNI executable a container runtime runs for netattach in thick mode.
 *
 *   runtime -- env CNI_*, config on stdin -->  shim -- POST /cni {env, stdin} --> daemon
 *           <-- stdout, exit code ----------        <-- {exitCode, stdout} -----
 *                                                (HTTP/1.1 on a UNIX socket)
 *
 * The native form of src/netattach/shim/main.py, held to the same tests (tests/shim) and
 * answering with the same bytes: an operator cannot tell which form answered. It is a pipe that
 * answers only what the daemon cannot:
 *   - VERSION, which a runtime may ask before any daemon exists;
 *   - the daemon unreachable or unreadable (no socket, refused, closed early, timed out,
 *     garbage) -> CNI error 11 naming the socket, for DEL too;
 *   - a config naming no usable socket -> CNI error 7.
 * A config that is not a JSON object names no socket: it goes to the default one, whose daemon
 * reports it (error 6).
 *
 * Statically linked and alone: it must run where the host has no Python and an old libc, in a
 * mount namespace holding nothing but itself and the daemon's socket. It reads no file but stdin.
 *
 * Its JSON reading is the attack surface: a validating parser with Python's `json` semantics
 * (what main.py reads with), bounded in size and depth, fuzzed against Python (tests/shim).
 *
 * Build: cc -std=c11 -O2 -Wall -Wextra -Werror -D_FORTIFY_SOURCE=2 -static (scripts/build-shim.sh).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- limits and constants (each must match main.py, wire.py or cni/spec.py) ---- */

#define MAX_STDIN_BYTES (1024 * 1024)        /* wire.MAX_REQUEST_BYTES */
#define MAX_REPLY_BYTES (16 * 1024 * 1024)   /* main.MAX_REPLY_BYTES */
#define MAX_DEPTH 512                        /* deeper JSON is refused (Python recurses ~1000) */
#define MAX_INT_DIGITS 4300                  /* Python's int() refuses longer decimal integers */
#define SUN_PATH_MAX_BYTES 107               /* sockaddr_un.sun_path, less its NUL */
#define QUOTE_MAX_CHARS 200                  /* a quoted bad value is cut to this */
#define LINE_QUOTE_MAX 80                    /* a quoted bad reply line is cut to this */
#define TOKEN_QUOTE_MAX 40                   /* a quoted bad length or chunk size */
#define MSG_MAX 2048
#define RECV_BYTES 65536
#define DEFAULT_TIMEOUT 300.0
#define CONNECT_RETRY_FIRST 0.005
#define CONNECT_RETRY_MAX 0.2
/* No daemon (no socket, or nobody listening): how long to wait for one, and the pauses. */
#define DEFAULT_DAEMON_WAIT 30.0
#define DAEMON_RETRY_FIRST 0.05
#define DAEMON_RETRY_MAX 0.5

static const char DEFAULT_SOCKET[] = "/run/netattach/netattach.sock";
static const char SOCKET_KEY[] = "daemonSocket";
static const char VERSION_KEY[] = "cniVersion";
static const char TIMEOUT_ENV[] = "NETATTACH_SHIM_TIMEOUT";
static const char DAEMON_WAIT_ENV[] = "NETATTACH_SHIM_DAEMON_WAIT";
static const char CURRENT_VERSION_JSON[] = "\"1.1.0\"";
static const char SUPPORTED_VERSIONS_JSON[] =
    "[\"0.1.0\", \"0.2.0\", \"0.3.0\", \"0.3.1\", \"0.4.0\", \"1.0.0\", \"1.1.0\"]";

enum { CODE_INVALID_CONFIG = 7, CODE_TRY_AGAIN = 11, CODE_IO_FAILURE = 5 };

extern char **environ;

/* ---- bounded byte buffers ---- */

struct bytes {
    unsigned char *data;
    size_t len;
    size_t cap;
    size_t limit; /* the buffer never grows past this many bytes */
    bool overflow;
};

static bool bytes_reserve(struct bytes *b, size_t extra)
{
    if (b->overflow || extra > b->limit - b->len) {
        b->overflow = true;
        return false;
    }
    if (b->len + extra <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap = cap > b->limit / 2 ? b->limit : cap * 2;
    unsigned char *grown = realloc(b->data, cap);
    if (grown == NULL) {
        b->overflow = true;
        return false;
    }
    b->data = grown;
    b->cap = cap;
    return true;
}

static void bytes_put(struct bytes *b, const void *data, size_t len)
{
    if (len && bytes_reserve(b, len)) {
        memcpy(b->data + b->len, data, len);
        b->len += len;
    }
}

static void bytes_puts(struct bytes *b, const char *text) { bytes_put(b, text, strlen(text)); }

/* ---- text: UTF-8 decoding as Python's "surrogateescape", JSON escaping as Python's json ---- */

/* The code point at s (n > 0 bytes left) and its length; a byte that starts no valid UTF-8
 * sequence is one code point U+DC80..U+DCFF, as Python's `decode("utf-8", "surrogateescape")`. */
static size_t decode_utf8(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t value;
    unsigned char low = 0x80, high = 0xBF; /* the second byte's range */
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        value = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        value = c & 0x0F;
        if (c == 0xE0)
            low = 0xA0;
        if (c == 0xED)
            high = 0x9F; /* no encoded surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        value = c & 0x07;
        if (c == 0xF0)
            low = 0x90;
        if (c == 0xF4)
            high = 0x8F; /* nothing past U+10FFFF */
    } else {
        *cp = 0xDC00u + c;
        return 1;
    }
    if (n < len || s[1] < low || s[1] > high) {
        *cp = 0xDC00u + c;
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if (s[i] < 0x80 || s[i] > 0xBF) {
            *cp = 0xDC00u + c;
            return 1;
        }
        value = (value << 6) | (s[i] & 0x3F);
    }
    *cp = value;
    return len;
}

static size_t encode_utf8(uint32_t cp, unsigned char out[4])
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

static bool is_surrogate(uint32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }

/* One code point inside a JSON string, escaped as Python's json.dumps (ensure_ascii) does. */
static void put_escaped(struct bytes *out, uint32_t cp)
{
    static const char hex[] = "0123456789abcdef";
    char text[13];
    switch (cp) {
    case '"': bytes_puts(out, "\\\""); return;
    case '\\': bytes_puts(out, "\\\\"); return;
    case '\n': bytes_puts(out, "\\n"); return;
    case '\r': bytes_puts(out, "\\r"); return;
    case '\t': bytes_puts(out, "\\t"); return;
    case '\b': bytes_puts(out, "\\b"); return;
    case '\f': bytes_puts(out, "\\f"); return;
    default: break;
    }
    if (cp >= 0x20 && cp <= 0x7E) {
        char c = (char)cp;
        bytes_put(out, &c, 1);
        return;
    }
    uint32_t units[2] = {cp, 0};
    int count = 1;
    if (cp >= 0x10000) {
        units[0] = 0xD800 + ((cp - 0x10000) >> 10);
        units[1] = 0xDC00 + ((cp - 0x10000) & 0x3FF);
        count = 2;
    }
    for (int i = 0; i < count; i++) {
        text[0] = '\\';
        text[1] = 'u';
        for (int d = 0; d < 4; d++)
            text[2 + d] = hex[(units[i] >> (12 - 4 * d)) & 0xF];
        bytes_put(out, text, 6);
    }
}

/* bytes (UTF-8, surrogateescape) as a JSON string, as json.dumps(data.decode(..)) writes it. */
static void put_json_text(struct bytes *out, const unsigned char *data, size_t len)
{
    bytes_puts(out, "\"");
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += decode_utf8(data + i, len - i, &cp);
        put_escaped(out, cp);
    }
    bytes_puts(out, "\"");
}

/* bytes as a JSON string of their Latin-1 reading, cut to `max` bytes: a quote of raw reply
 * bytes (main.py `_quote`). The result is ASCII. */
static void put_quoted_bytes(struct bytes *out, const unsigned char *data, size_t len, size_t max)
{
    bytes_puts(out, "\"");
    for (size_t i = 0; i < len && i < max; i++)
        put_escaped(out, data[i]);
    bytes_puts(out, "\"");
}

/* ---- JSON: a validating reader with Python's json.loads semantics ---- */

enum kind { J_NONE, J_STRING, J_INT, J_FLOAT, J_OBJECT, J_ARRAY, J_TRUE, J_FALSE, J_NULL };

/* The last top-level member named `name`: where its value is and what it is. */
struct member {
    const char *name;
    enum kind kind;
    size_t start, end;
};

struct parser {
    const unsigned char *s;
    size_t len, pos;
    int depth;
    bool too_deep;
    struct member *wanted; /* top-level members to find (last occurrence wins, as in a dict) */
    size_t wanted_count;
};

/* Receives each code point of a string; `ctx` is the sink's own state. */
typedef void (*sink_fn)(void *ctx, uint32_t cp);

static bool is_json_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_space(struct parser *p)
{
    while (p->pos < p->len && is_json_space(p->s[p->pos]))
        p->pos++;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool read_hex4(const struct parser *p, size_t at, uint32_t *value)
{
    if (p->len - at < 4)
        return false;
    *value = 0;
    for (size_t i = 0; i < 4; i++) {
        int digit = hex_value(p->s[at + i]);
        if (digit < 0)
            return false;
        *value = (*value << 4) | (uint32_t)digit;
    }
    return true;
}

/* A string at p->pos (its opening quote); each code point to `sink` when one is given. */
static bool scan_string(struct parser *p, sink_fn sink, void *ctx)
{
    p->pos++; /* the opening quote */
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        uint32_t cp;
        if (c == '"') {
            p->pos++;
            return true;
        }
        if (c < 0x20)
            return false; /* strict: a raw control character */
        if (c != '\\') {
            p->pos += decode_utf8(p->s + p->pos, p->len - p->pos, &cp);
            if (sink)
                sink(ctx, cp);
            continue;
        }
        if (p->len - p->pos < 2)
            return false;
        unsigned char e = p->s[p->pos + 1];
        p->pos += 2;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (!read_hex4(p, p->pos, &cp))
                return false;
            p->pos += 4;
            /* A high surrogate escape followed by a low one is one code point, as in Python. */
            if (cp >= 0xD800 && cp <= 0xDBFF && p->len - p->pos >= 6 && p->s[p->pos] == '\\' &&
                p->s[p->pos + 1] == 'u') {
                uint32_t low;
                if (!read_hex4(p, p->pos + 2, &low))
                    return false;
                if (low >= 0xDC00 && low <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    p->pos += 6;
                }
            }
            break;
        default:
            return false;
        }
        if (sink)
            sink(ctx, cp);
    }
    return false;
}

static bool scan_number(struct parser *p, enum kind *kind)
{
    size_t start = p->pos;
    if (p->pos < p->len && p->s[p->pos] == '-')
        p->pos++;
    size_t digits = p->pos;
    if (p->pos < p->len && p->s[p->pos] == '0') {
        p->pos++;
    } else if (p->pos < p->len && p->s[p->pos] >= '1' && p->s[p->pos] <= '9') {
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            p->pos++;
    } else {
        p->pos = start;
        return false;
    }
    size_t int_digits = p->pos - digits;
    *kind = J_INT;
    if (p->len - p->pos >= 2 && p->s[p->pos] == '.' && p->s[p->pos + 1] >= '0' &&
        p->s[p->pos + 1] <= '9') {
        p->pos += 2;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            p->pos++;
        *kind = J_FLOAT;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        size_t mark = p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
            while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
                p->pos++;
            *kind = J_FLOAT;
        } else {
            p->pos = mark; /* "1e" is the number 1 followed by garbage, as Python reads it */
        }
    }
    return *kind == J_FLOAT || int_digits <= MAX_INT_DIGITS;
}

static bool scan_literal(struct parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return false;
    p->pos += n;
    return true;
}

struct key_match {
    const char *name;
    size_t index;
    bool equal;
};

static void match_key(void *ctx, uint32_t cp)
{
    struct key_match *m = ctx;
    if (m->equal && (m->name[m->index] == '\0' || (unsigned char)m->name[m->index] != cp))
        m->equal = false;
    if (m->name[m->index] != '\0')
        m->index++;
}

static bool scan_value(struct parser *p, enum kind *kind);

/* The member key at p->pos: which wanted member it names, or -1. */
static bool scan_key(struct parser *p, long *wanted)
{
    size_t start = p->pos;
    *wanted = -1;
    for (size_t i = 0; i < p->wanted_count && p->depth == 1; i++) {
        struct key_match m = {p->wanted[i].name, 0, true};
        p->pos = start;
        if (!scan_string(p, match_key, &m))
            return false;
        if (m.equal && m.name[m.index] == '\0')
            *wanted = (long)i;
    }
    p->pos = start;
    return scan_string(p, NULL, NULL);
}

/* After an opening bracket, a member or an element: skip space, then take `close` if it is next
 * (true: the container ended). */
static bool take(struct parser *p, char close)
{
    skip_space(p);
    if (p->pos < p->len && p->s[p->pos] == (unsigned char)close) {
        p->pos++;
        return true;
    }
    return false;
}

static bool take_comma(struct parser *p)
{
    if (p->pos >= p->len || p->s[p->pos] != ',')
        return false;
    p->pos++;
    skip_space(p);
    return true;
}

static bool scan_object(struct parser *p)
{
    p->pos++;
    if (take(p, '}'))
        return true;
    for (;;) {
        long wanted;
        enum kind kind;
        if (p->pos >= p->len || p->s[p->pos] != '"' || !scan_key(p, &wanted))
            return false;
        skip_space(p);
        if (p->pos >= p->len || p->s[p->pos] != ':')
            return false;
        p->pos++;
        skip_space(p);
        size_t start = p->pos;
        if (!scan_value(p, &kind))
            return false;
        if (wanted >= 0) {
            p->wanted[wanted].kind = kind;
            p->wanted[wanted].start = start;
            p->wanted[wanted].end = p->pos;
        }
        if (take(p, '}'))
            return true;
        if (!take_comma(p))
            return false;
    }
}

static bool scan_array(struct parser *p)
{
    p->pos++;
    if (take(p, ']'))
        return true;
    for (;;) {
        enum kind kind;
        if (!scan_value(p, &kind))
            return false;
        if (take(p, ']'))
            return true;
        if (!take_comma(p))
            return false;
    }
}

static bool scan_value(struct parser *p, enum kind *kind)
{
    if (p->pos >= p->len)
        return false;
    switch (p->s[p->pos]) {
    case '"':
        *kind = J_STRING;
        return scan_string(p, NULL, NULL);
    case '{':
    case '[': {
        bool object = p->s[p->pos] == '{';
        if (++p->depth > MAX_DEPTH) {
            p->too_deep = true;
            return false;
        }
        *kind = object ? J_OBJECT : J_ARRAY;
        bool ok = object ? scan_object(p) : scan_array(p);
        p->depth--;
        return ok;
    }
    case 't': *kind = J_TRUE; return scan_literal(p, "true");
    case 'f': *kind = J_FALSE; return scan_literal(p, "false");
    case 'n': *kind = J_NULL; return scan_literal(p, "null");
    default: return scan_number(p, kind);
    }
}

/* Reads a whole document whose top level must be an object, finding the wanted members.
 * False when it is not one JSON object (after leading and trailing JSON whitespace). */
static bool scan_document(struct parser *p)
{
    enum kind kind;
    skip_space(p);
    if (p->pos >= p->len || p->s[p->pos] != '{')
        return false;
    if (!scan_value(p, &kind))
        return false;
    skip_space(p);
    return p->pos == p->len;
}

/* A member's string value, re-read into a sink. */
static void read_member_string(const struct parser *p, const struct member *m, sink_fn sink,
                               void *ctx)
{
    struct parser again = *p;
    again.pos = m->start;
    again.wanted_count = 0;
    (void)scan_string(&again, sink, ctx);
}

/* ---- sinks for string values ---- */

static void sink_escaped(void *ctx, uint32_t cp) { put_escaped(ctx, cp); }

/* Code points to bytes as Python's `encode("utf-8", "surrogateescape")`; any other surrogate
 * cannot be encoded. */
struct encoder {
    struct bytes *out;
    bool strict; /* strict: no surrogate at all (what `encode("utf-8")` accepts) */
    bool failed;
};

static void sink_encode(void *ctx, uint32_t cp)
{
    struct encoder *e = ctx;
    unsigned char text[4];
    if (is_surrogate(cp)) {
        if (e->strict || cp < 0xDC80 || cp > 0xDCFF) {
            e->failed = true;
            return;
        }
        text[0] = (unsigned char)(cp - 0xDC00);
        bytes_put(e->out, text, 1);
        return;
    }
    bytes_put(e->out, text, encode_utf8(cp, text));
}

struct first_cp {
    uint32_t cp;
    bool seen;
};

static void sink_first(void *ctx, uint32_t cp)
{
    struct first_cp *first = ctx;
    if (!first->seen) {
        first->cp = cp;
        first->seen = true;
    }
}

/* ---- errors: what the shim prints itself ---- */

struct failure {
    int code;
    char msg[MSG_MAX];     /* UTF-8 */
    char details[MSG_MAX]; /* UTF-8; empty: none */
};

static void fail(struct failure *f, int code, const char *details, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

static void fail(struct failure *f, int code, const char *details, const char *format, ...)
{
    va_list args;
    f->code = code;
    va_start(args, format);
    vsnprintf(f->msg, sizeof f->msg, format, args);
    va_end(args);
    snprintf(f->details, sizeof f->details, "%s", details ? details : "");
}

/* ---- the config: its cniVersion and daemonSocket ---- */

struct config {
    struct bytes version_json; /* the cniVersion as a JSON string, escaped */
    char socket[SUN_PATH_MAX_BYTES + 1];
};

/* The JSON quote of a member's value for an error's details: `got "..."`, cut as main.py cuts. */
static void quote_value(const struct parser *p, const struct member *m, char *out, size_t size)
{
    struct bytes quoted = {.limit = 8 * (size_t)MAX_STDIN_BYTES};
    const char *word = NULL;
    switch (m->kind) {
    case J_STRING:
        bytes_puts(&quoted, "\"");
        read_member_string(p, m, sink_escaped, &quoted);
        bytes_puts(&quoted, "\"");
        break;
    case J_INT:
    case J_FLOAT: word = "a JSON number"; break;
    case J_OBJECT: word = "a JSON object"; break;
    case J_ARRAY: word = "a JSON array"; break;
    case J_TRUE: word = "true"; break;
    case J_FALSE: word = "false"; break;
    default: word = "null"; break;
    }
    if (word)
        snprintf(out, size, "got %s", word);
    else
        snprintf(out, size, "got %.*s", (int)(quoted.len < QUOTE_MAX_CHARS ? quoted.len : QUOTE_MAX_CHARS),
                 quoted.data ? (const char *)quoted.data : "");
    free(quoted.data);
}

/* Reads the config; false (with `f` set) when it names no usable socket. VERSION needs only
 * the version, so `*socket_ok` tells the caller whether the socket part succeeded. */
static bool read_config(const struct bytes *stdin_bytes, struct config *cfg, struct failure *f,
                        bool *socket_ok)
{
    struct member wanted[2] = {{VERSION_KEY, J_NONE, 0, 0}, {SOCKET_KEY, J_NONE, 0, 0}};
    struct parser p = {stdin_bytes->data ? stdin_bytes->data : (const unsigned char *)"",
                       stdin_bytes->len, 0, 0, false, wanted, 2};
    char details[MSG_MAX];
    *socket_ok = false;
    cfg->version_json = (struct bytes){.limit = 8 * (size_t)MAX_STDIN_BYTES};
    if (!scan_document(&p)) {
        if (p.too_deep) {
            snprintf(details, sizeof details, "more than %d levels of objects and arrays", MAX_DEPTH);
            fail(f, CODE_INVALID_CONFIG, details, "the network config nests too deeply");
            return false;
        }
        wanted[0].kind = wanted[1].kind = J_NONE; /* not a JSON object: the defaults */
    }
    if (wanted[0].kind == J_STRING && wanted[0].end - wanted[0].start > 2) {
        bytes_puts(&cfg->version_json, "\"");
        read_member_string(&p, &wanted[0], sink_escaped, &cfg->version_json);
        bytes_puts(&cfg->version_json, "\"");
    } else {
        bytes_puts(&cfg->version_json, CURRENT_VERSION_JSON);
    }
    if (cfg->version_json.overflow) {
        fail(f, CODE_IO_FAILURE, NULL, "out of memory reading the network config");
        return false;
    }
    if (wanted[1].kind == J_NONE) {
        memcpy(cfg->socket, DEFAULT_SOCKET, sizeof DEFAULT_SOCKET);
        *socket_ok = true;
        return true;
    }
    struct first_cp first = {0, false};
    if (wanted[1].kind == J_STRING)
        read_member_string(&p, &wanted[1], sink_first, &first);
    /* main.py: not a string, or not starting with "/" -> "must be an absolute path". */
    if (!first.seen || first.cp != '/') {
        quote_value(&p, &wanted[1], details, sizeof details);
        fail(f, CODE_INVALID_CONFIG, details,
             "%s must be an absolute path to the netattach daemon's socket", SOCKET_KEY);
        return true;
    }
    struct bytes path = {.limit = SUN_PATH_MAX_BYTES + 1};
    struct encoder encoder = {&path, true, false};
    read_member_string(&p, &wanted[1], sink_encode, &encoder);
    bool usable = !encoder.failed && !path.overflow && path.len <= SUN_PATH_MAX_BYTES &&
                  memchr(path.data, '\0', path.len) == NULL;
    if (!usable) {
        quote_value(&p, &wanted[1], details, sizeof details);
        fail(f, CODE_INVALID_CONFIG, details,
             "%s is not a usable UNIX socket path (at most %d bytes of UTF-8, no NUL)",
             SOCKET_KEY, SUN_PATH_MAX_BYTES);
        free(path.data);
        return true;
    }
    memcpy(cfg->socket, path.data, path.len);
    cfg->socket[path.len] = '\0';
    free(path.data);
    *socket_ok = true;
    return true;
}

/* ---- the request ---- */

static bool starts_with(const char *text, const char *prefix)
{
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

/* {"env": {CNI_* only, first of duplicates as Python's os.environ}, "stdin": "..."}, with the
 * bytes json.dumps would write for main.py's request (wire.encode_request). */
static void build_body(struct bytes *body, const struct bytes *stdin_bytes)
{
    bool first = true;
    bytes_puts(body, "{\"env\": {");
    for (char **entry = environ; *entry; entry++) {
        const char *equals = strchr(*entry, '=');
        if (equals == NULL || !starts_with(*entry, "CNI_"))
            continue;
        size_t name_len = (size_t)(equals - *entry);
        bool seen = false;
        for (char **earlier = environ; earlier != entry && !seen; earlier++)
            seen = strncmp(*earlier, *entry, name_len + 1) == 0;
        if (seen)
            continue;
        if (!first)
            bytes_puts(body, ", ");
        first = false;
        put_json_text(body, (const unsigned char *)*entry, name_len);
        bytes_puts(body, ": ");
        put_json_text(body, (const unsigned char *)equals + 1, strlen(equals + 1));
    }
    bytes_puts(body, "}, \"stdin\": ");
    put_json_text(body, stdin_bytes->data ? stdin_bytes->data : (const unsigned char *)"",
                  stdin_bytes->len);
    bytes_puts(body, "}");
}

/* ---- the exchange ---- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_for(double seconds)
{
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Seconds from the variable `name`, as main.py reads them; `fallback` when it is unset or not
 * a number, or not above 0 (at least 0 with `zero_ok`). */
static double read_seconds(const char *name, double fallback, bool zero_ok)
{
    const char *text = getenv(name);
    char *end;
    if (text == NULL)
        return fallback;
    while (*text == ' ' || *text == '\t')
        text++;
    /* decimal only: what Python's float() reads of the values anyone sets */
    for (const char *c = text; *c && *c != ' ' && *c != '\t' && *c != '\n'; c++)
        if (!strchr("0123456789.eE+-", *c))
            return fallback;
    errno = 0;
    double seconds = strtod(text, &end);
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (end == text || *end != '\0' || errno == ERANGE || seconds > 1e9)
        return fallback;
    if (!(seconds > 0) && !(zero_ok && seconds == 0))
        return fallback;
    return seconds;
}

/* Waits until fd is ready for `events` or the deadline passes (then errno = ETIMEDOUT). */
static bool wait_ready(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - now();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return false;
        }
        struct pollfd pfd = {fd, events, 0};
        int ms = left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
        int n = poll(&pfd, 1, ms);
        if (n > 0)
            return true;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

/* The step that failed and why, as main.py `_describe` words it. */
static void describe(char *out, size_t size, const char *step, int error, double deadline)
{
    if (error == ETIMEDOUT || now() >= deadline)
        snprintf(out, size, "%s failed: timed out", step);
    else
        snprintf(out, size, "%s failed: %s", step, strerror(error));
}

/* Connects, waiting while the daemon's accept queue is full: a UNIX socket refuses a connection
 * to a full queue at once (EAGAIN) instead of waiting. Growing pauses, until the deadline. No
 * daemon (no socket file, or nobody listening) is waited for NETATTACH_SHIM_DAEMON_WAIT. */
static int connect_socket(int fd, const struct sockaddr_un *address, double deadline)
{
    double busy = CONNECT_RETRY_FIRST;
    double absent = DAEMON_RETRY_FIRST;
    double absent_until = now() + read_seconds(DAEMON_WAIT_ENV, DEFAULT_DAEMON_WAIT, true);
    if (absent_until > deadline)
        absent_until = deadline;
    for (;;) {
        if (connect(fd, (const struct sockaddr *)address, sizeof *address) == 0)
            return 0;
        int error = errno;
        if (error == EINTR)
            continue;
        if (error == EAGAIN) {
            if (now() + busy > deadline)
                return error;
            pause_for(busy);
            busy = busy * 2 > CONNECT_RETRY_MAX ? CONNECT_RETRY_MAX : busy * 2;
        } else if (error == ENOENT || error == ECONNREFUSED) {
            double left = absent_until - now();
            if (left <= 0)
                return error;
            pause_for(absent < left ? absent : left);
            absent = absent * 2 > DAEMON_RETRY_MAX ? DAEMON_RETRY_MAX : absent * 2;
        } else {
            return error;
        }
    }
}

static int send_all(int fd, const unsigned char *data, size_t len, double deadline)
{
    while (len > 0) {
        if (!wait_ready(fd, POLLOUT, deadline))
            return errno;
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return errno;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Everything up to EOF (the request said `Connection: close`), within the deadline and
 * MAX_REPLY_BYTES. 0, an errno, or -1 when the reply is too large. */
static int receive_all(int fd, struct bytes *raw, double deadline)
{
    for (;;) {
        if (!wait_ready(fd, POLLIN, deadline))
            return errno;
        if (!bytes_reserve(raw, RECV_BYTES < raw->limit - raw->len ? RECV_BYTES : 1))
            return -1;
        size_t room = raw->cap - raw->len;
        ssize_t n = recv(fd, raw->data + raw->len, room, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return errno;
        }
        if (n == 0)
            return 0;
        raw->len += (size_t)n;
    }
}

/* ---- the HTTP reply (main.py parse_http_reply, decode_chunked) ---- */

static bool is_ascii_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

struct span {
    const unsigned char *data;
    size_t len;
};

static struct span strip(struct span s)
{
    while (s.len && is_ascii_space(s.data[0])) {
        s.data++;
        s.len--;
    }
    while (s.len && is_ascii_space(s.data[s.len - 1]))
        s.len--;
    return s;
}

static bool span_equals_lower(struct span s, const char *lower)
{
    size_t n = strlen(lower);
    if (s.len != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s.data[i];
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        if (c != (unsigned char)lower[i])
            return false;
    }
    return true;
}

static bool span_contains_lower(struct span s, const char *lower)
{
    size_t n = strlen(lower);
    for (size_t at = 0; at + n <= s.len; at++) {
        struct span part = {s.data + at, n};
        if (span_equals_lower(part, lower))
            return true;
    }
    return false;
}

static const unsigned char *find(const unsigned char *data, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t at = 0; at + n <= len; at++)
        if (memcmp(data + at, needle, n) == 0)
            return data + at;
    return NULL;
}

static void message_with_quote(char *out, size_t size, const char *prefix, struct span quoted,
                               size_t max)
{
    struct bytes text = {.limit = MSG_MAX};
    bytes_puts(&text, prefix);
    put_quoted_bytes(&text, quoted.data, quoted.len, max);
    snprintf(out, size, "%.*s", (int)text.len, text.data ? (const char *)text.data : "");
    free(text.data);
}

static bool decode_chunked(struct span data, struct bytes *body, char *why, size_t size)
{
    size_t position = 0;
    for (;;) {
        const unsigned char *end_of_size = find(data.data + position, data.len - position, "\r\n");
        if (end_of_size == NULL) {
            snprintf(why, size, "the chunked reply was cut short");
            return false;
        }
        struct span size_text = {data.data + position, (size_t)(end_of_size - data.data) - position};
        const unsigned char *semicolon = memchr(size_text.data, ';', size_text.len);
        if (semicolon)
            size_text.len = (size_t)(semicolon - size_text.data);
        size_text = strip(size_text);
        size_t chunk = 0;
        bool valid = size_text.len > 0;
        for (size_t i = 0; i < size_text.len && valid; i++) {
            int digit = hex_value(size_text.data[i]);
            valid = digit >= 0;
            chunk = chunk > MAX_REPLY_BYTES ? chunk : chunk * 16 + (size_t)(digit < 0 ? 0 : digit);
        }
        if (!valid) {
            message_with_quote(why, size, "not a chunk size: ", size_text, TOKEN_QUOTE_MAX);
            return false;
        }
        if (chunk == 0)
            return true;
        size_t start = (size_t)(end_of_size - data.data) + 2;
        if (chunk > data.len || data.len - start < chunk + 2) {
            snprintf(why, size, "the chunked reply was cut short");
            return false;
        }
        bytes_put(body, data.data + start, chunk);
        position = start + chunk + 2;
    }
}

/* An HTTP/1.x response read to EOF: its status (3 digits) and body; false with `why`. */
static bool parse_http_reply(const struct bytes *raw, char status[4], struct bytes *body, char *why,
                             size_t size)
{
    if (raw->len == 0) {
        snprintf(why, size, "the daemon closed the connection without replying");
        return false;
    }
    const unsigned char *separator = find(raw->data, raw->len, "\r\n\r\n");
    if (separator == NULL) {
        snprintf(why, size, "the reply ended inside its headers after %zu bytes", raw->len);
        return false;
    }
    struct span head = {raw->data, (size_t)(separator - raw->data)};
    struct span rest = {separator + 4, raw->len - head.len - 4};
    const unsigned char *line_end = find(head.data, head.len, "\r\n");
    struct span line = {head.data, line_end ? (size_t)(line_end - head.data) : head.len};
    /* status line: split on whitespace; the first word HTTP/1.*, the second three digits */
    struct span words[2] = {{NULL, 0}, {NULL, 0}};
    size_t at = 0;
    for (int w = 0; w < 2; w++) {
        while (at < line.len && is_ascii_space(line.data[at]))
            at++;
        words[w].data = line.data + at;
        while (at < line.len && !is_ascii_space(line.data[at]))
            at++;
        words[w].len = (size_t)(line.data + at - words[w].data);
    }
    bool digits = words[1].len == 3;
    for (size_t i = 0; i < words[1].len && digits; i++)
        digits = words[1].data[i] >= '0' && words[1].data[i] <= '9';
    if (words[0].len < 7 || memcmp(words[0].data, "HTTP/1.", 7) != 0 || !digits) {
        message_with_quote(why, size, "not an HTTP/1.x status line: ", line, LINE_QUOTE_MAX);
        return false;
    }
    memcpy(status, words[1].data, 3);
    status[3] = '\0';
    struct span transfer = {NULL, 0}, length = {NULL, 0};
    bool has_length = false;
    while (line_end != NULL) {
        size_t start = (size_t)(line_end - head.data) + 2;
        line_end = find(head.data + start, head.len - start, "\r\n");
        line.data = head.data + start;
        line.len = line_end ? (size_t)(line_end - line.data) : head.len - start;
        const unsigned char *colon = memchr(line.data, ':', line.len);
        if (colon == NULL) {
            message_with_quote(why, size, "not an HTTP header line: ", line, LINE_QUOTE_MAX);
            return false;
        }
        struct span name = strip((struct span){line.data, (size_t)(colon - line.data)});
        struct span value = strip((struct span){colon + 1, line.len - (size_t)(colon - line.data) - 1});
        if (span_equals_lower(name, "transfer-encoding"))
            transfer = value;
        if (span_equals_lower(name, "content-length")) {
            length = value;
            has_length = true;
        }
    }
    if (span_contains_lower(transfer, "chunked"))
        return decode_chunked(rest, body, why, size);
    if (!has_length) {
        bytes_put(body, rest.data, rest.len);
        return true;
    }
    bool valid = length.len > 0 && length.len <= 18;
    size_t expected = 0;
    for (size_t i = 0; i < length.len && valid; i++) {
        valid = length.data[i] >= '0' && length.data[i] <= '9';
        expected = expected * 10 + (size_t)(length.data[i] - '0');
    }
    if (!valid) {
        message_with_quote(why, size, "not a Content-Length: ", length, TOKEN_QUOTE_MAX);
        return false;
    }
    if (rest.len < expected) {
        snprintf(why, size, "the reply was cut short: %zu of %zu body bytes", rest.len, expected);
        return false;
    }
    bytes_put(body, rest.data, expected);
    return true;
}

/* ---- the reply body (wire.decode_reply) ---- */

static bool decode_reply(const struct bytes *body, int *exit_code, struct bytes *stdout_bytes,
                         char *why, size_t size)
{
    struct member wanted[2] = {{"exitCode", J_NONE, 0, 0}, {"stdout", J_NONE, 0, 0}};
    struct parser p = {body->data ? body->data : (const unsigned char *)"", body->len, 0, 0, false,
                       wanted, 2};
    size_t start = 0;
    while (start < body->len && is_json_space(body->data[start]))
        start++;
    if (!scan_document(&p)) {
        bool object = start < body->len && body->data[start] == '{';
        /* something else than an object that is still JSON */
        struct parser any = {p.s, p.len, start, 0, false, NULL, 0};
        enum kind kind;
        bool json = !object && scan_value(&any, &kind) && (skip_space(&any), any.pos == any.len);
        snprintf(why, size, json ? "reply body is not a JSON object" : "reply body is not JSON");
        return false;
    }
    if (wanted[0].kind != J_INT || (wanted[1].kind != J_STRING && wanted[1].kind != J_NONE)) {
        snprintf(why, size, "reply needs an integer 'exitCode' and a string 'stdout'");
        return false;
    }
    const unsigned char *digits = body->data + wanted[0].start;
    size_t n = wanted[0].end - wanted[0].start;
    long code = 0;
    bool negative = digits[0] == '-';
    bool in_range = !negative || (n == 2 && digits[1] == '0');
    for (size_t i = negative ? 1 : 0; i < n && in_range; i++) {
        code = code * 10 + (digits[i] - '0');
        in_range = code <= 255;
    }
    if (!in_range) {
        snprintf(why, size, "reply 'exitCode' must be from 0 to 255");
        return false;
    }
    if (wanted[1].kind == J_STRING) {
        struct encoder encoder = {stdout_bytes, false, false};
        read_member_string(&p, &wanted[1], sink_encode, &encoder);
        if (encoder.failed) {
            snprintf(why, size, "reply 'stdout' is not text");
            return false;
        }
    }
    *exit_code = (int)code;
    return true;
}

/* The daemon's (exit code, stdout) for one request; false with `f` (error 11) when there is
 * none. */
static bool fetch_reply(const char *path, const struct bytes *body, int *exit_code,
                        struct bytes *out, struct failure *f)
{
    double deadline = now() + read_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT, false);
    char why[MSG_MAX];
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    memcpy(address.sun_path, path, strlen(path) + 1);
    char head[256];
    int head_len = snprintf(head, sizeof head,
                            "POST /cni HTTP/1.1\r\nHost: netattach\r\n"
                            "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                            "Connection: close\r\n\r\n",
                            body->len);
    struct bytes request = {.limit = 16 * (size_t)MAX_STDIN_BYTES};
    bytes_put(&request, head, (size_t)head_len);
    bytes_put(&request, body->data, body->len);
    struct bytes raw = {.limit = MAX_REPLY_BYTES};
    struct bytes reply_body = {.limit = MAX_REPLY_BYTES};
    char status[4] = "";
    bool ok = false;
    int send_error = 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        describe(why, sizeof why, "connect", errno, deadline);
    } else if (request.overflow) {
        snprintf(why, sizeof why, "out of memory building the request");
    } else {
        int error = connect_socket(fd, &address, deadline);
        if (error) {
            describe(why, sizeof why, "connect", error, deadline);
        } else {
            /* The daemon may have answered early (413) and closed: its reply is still readable. */
            send_error = send_all(fd, request.data, request.len, deadline);
            error = receive_all(fd, &raw, deadline);
            if (error == -1)
                snprintf(why, sizeof why, "read the reply failed: the reply is larger than %d bytes",
                         MAX_REPLY_BYTES);
            else if (error)
                describe(why, sizeof why, "read the reply", error, deadline);
            else if (parse_http_reply(&raw, status, &reply_body, why, sizeof why))
                ok = true;
            else if (send_error)
                describe(why, sizeof why, "send the request", send_error, deadline);
        }
        close(fd);
    }
    if (ok) {
        ok = decode_reply(&reply_body, exit_code, out, why, sizeof why);
        if (!ok) {
            char detail[MSG_MAX];
            memcpy(detail, why, sizeof detail);
            snprintf(why, sizeof why, "unreadable HTTP %d reply: %.1900s", atoi(status), detail);
        }
    }
    if (!ok)
        fail(f, CODE_TRY_AGAIN, NULL, "netattach daemon at %s: %s", path, why);
    free(request.data);
    free(raw.data);
    free(reply_body.data);
    return ok;
}

/* ---- output ---- */

static int write_all(const unsigned char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDOUT_FILENO, data, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* CNI spec "Error": the error object to stdout, exit 1. */
static int print_failure(const struct failure *f, const struct bytes *version_json)
{
    struct bytes out = {.limit = 64 * 1024};
    char code[16];
    snprintf(code, sizeof code, "%d", f->code);
    bytes_puts(&out, "{\"cniVersion\": ");
    if (version_json && version_json->len)
        bytes_put(&out, version_json->data, version_json->len);
    else
        bytes_puts(&out, CURRENT_VERSION_JSON);
    bytes_puts(&out, ", \"code\": ");
    bytes_puts(&out, code);
    bytes_puts(&out, ", \"msg\": ");
    put_json_text(&out, (const unsigned char *)f->msg, strlen(f->msg));
    if (f->details[0]) {
        bytes_puts(&out, ", \"details\": ");
        put_json_text(&out, (const unsigned char *)f->details, strlen(f->details));
    }
    bytes_puts(&out, "}");
    write_all(out.data, out.len);
    free(out.data);
    return 1;
}

static bool too_large(struct failure *f)
{
    char details[64];
    snprintf(details, sizeof details, "more than %d bytes", MAX_STDIN_BYTES);
    fail(f, CODE_INVALID_CONFIG, details, "the network config is too large");
    return false;
}

static bool read_stdin(struct bytes *in, struct failure *f)
{
    for (;;) {
        if (!bytes_reserve(in, 65536 < in->limit - in->len ? 65536 : 1))
            return too_large(f);
        ssize_t n = read(STDIN_FILENO, in->data + in->len, in->cap - in->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fail(f, CODE_IO_FAILURE, NULL, "read stdin failed: %s", strerror(errno));
            return false;
        }
        if (n == 0)
            return true;
        in->len += (size_t)n;
        if (in->len > MAX_STDIN_BYTES)
            return too_large(f);
    }
}

int main(void)
{
    struct bytes in = {.limit = MAX_STDIN_BYTES + 1};
    struct config cfg = {{0}, ""};
    struct failure f = {0, "", ""};
    struct bytes out = {.limit = MAX_REPLY_BYTES};
    bool socket_ok = false;
    int code = 1;

    if (!read_stdin(&in, &f) || !read_config(&in, &cfg, &f, &socket_ok)) {
        code = print_failure(&f, NULL);
    } else if (getenv("CNI_COMMAND") && strcmp(getenv("CNI_COMMAND"), "VERSION") == 0) {
        /* CNI spec "VERSION": answered from the config's cniVersion. */
        bytes_puts(&out, "{\"cniVersion\": ");
        bytes_put(&out, cfg.version_json.data, cfg.version_json.len);
        bytes_puts(&out, ", \"supportedVersions\": ");
        bytes_puts(&out, SUPPORTED_VERSIONS_JSON);
        bytes_puts(&out, "}");
        code = write_all(out.data, out.len);
    } else if (!socket_ok) {
        code = print_failure(&f, &cfg.version_json);
    } else {
        struct bytes body = {.limit = 8 * (size_t)MAX_STDIN_BYTES};
        build_body(&body, &in);
        if (fetch_reply(cfg.socket, &body, &code, &out, &f))
            write_all(out.data, out.len);
        else
            code = print_failure(&f, &cfg.version_json);
        free(body.data);
    }
    free(in.data);
    free(cfg.version_json.data);
    free(out.data);
    return code;
}
