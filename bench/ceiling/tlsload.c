/*
 * tlsload: the HTTPS load client of the bench lab's case T (handshakes, resumed
 * handshakes, large bodies), one thread, epoll, OpenSSL.
 *
 * h2load makes a full handshake per connection and never resumes; wrk keeps its
 * connections; sink speaks plain TCP. tlsload does the three things case T needs with
 * one client, so that full and resumed handshakes differ in resumption only:
 *
 * usage: tlsload MODE HOST:PORT PATH SECONDS CONNS
 *   new     each of CONNS connections loops: connect, full TLS 1.3 handshake, GET PATH
 *           with Connection: close, read the whole answer, close, again
 *   resume  the same, every handshake offering the newest session ticket a previous
 *           connection received (the first connection makes a full handshake)
 *   bulk    CONNS keep-alive connections, GET PATH again and again; bodies are
 *           decrypted (a TLS client cannot avoid that) and dropped
 * The certificate is not verified (h2load and wrk do not verify either); SNI
 * localhost, ALPN http/1.1, TLS 1.3 only. With TLSLOAD_CERT and TLSLOAD_KEY set (PEM
 * files), every handshake presents that client certificate (case T's mutual TLS rows).
 * Prints the line of the bench/wrk Lua scripts and sink.c, plus the handshake counts:
 *   WRK_RESULT requests=N duration_us=N bytes=N connect=N read=N write=N status=N
 *     timeout=0 handshakes=N resumed=N
 * requests: answers read in full with status 200; connect: connections or handshakes
 * that failed; read: answers cut short; status: answers other than 200.
 * build: gcc -O2 -o tlsload tlsload.c -lssl -lcrypto
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX 8192
#define BUF_LEN (256 * 1024)

enum mode { NEW, RESUME, BULK };
enum state { HANDSHAKE, WRITING, READING };

struct conn {
    int fd;
    SSL *ssl;
    enum state st;
    size_t head_len;
    int in_body;
    unsigned long long body_left;
    char head[HEAD_MAX];
};

static enum mode mode;
static struct sockaddr_in addr;
static SSL_CTX *ctx;
static SSL_SESSION *newest; /* resume: the newest session (ticket) received */
static char req[1024];
static int req_len;
static int ep;
static unsigned char buf[BUF_LEN];
static unsigned long long n_req, n_bytes, n_hs, n_resumed, e_connect, e_read, e_write, e_status;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* OpenSSL calls this for every session ticket the server sends (TLS 1.3: after the
 * handshake, read along with the answer). Keeping it takes the reference. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess) {
    (void)ssl;
    if (mode != RESUME)
        return 0;
    if (newest)
        SSL_SESSION_free(newest);
    newest = sess;
    return 1;
}

static void watch(struct conn *c, int op, unsigned events) {
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(ep, op, c->fd, &ev);
}

static void close_conn(struct conn *c) {
    if (c->ssl)
        SSL_free(c->ssl);
    c->ssl = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static int open_conn(struct conn *c) {
    c->fd = socket(AF_INET, SOCK_STREAM, 0); /* blocking connect (loopback), then non-blocking */
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        e_connect++;
        return -1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
    c->ssl = SSL_new(ctx);
    SSL_set_fd(c->ssl, c->fd);
    SSL_set_tlsext_host_name(c->ssl, "localhost");
    if (mode == RESUME && newest)
        SSL_set_session(c->ssl, newest);
    c->st = HANDSHAKE;
    c->head_len = 0;
    c->in_body = 0;
    watch(c, EPOLL_CTL_ADD, EPOLLOUT);
    return 0;
}

/* a failed connection is replaced by a new one (after the count) */
static void restart(struct conn *c) {
    close_conn(c);
    open_conn(c);
}

/* what SSL_get_error says about RET: 1 to wait for the socket (epoll set), 0 for an error */
static int wait_io(struct conn *c, int ret) {
    int e = SSL_get_error(c->ssl, ret);
    if (e == SSL_ERROR_WANT_READ) {
        watch(c, EPOLL_CTL_MOD, EPOLLIN);
        return 1;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        watch(c, EPOLL_CTL_MOD, EPOLLOUT);
        return 1;
    }
    ERR_clear_error();
    return 0;
}

/* the head in c->head is complete (ends at END): check it, start the body */
static int start_body(struct conn *c, size_t end) {
    c->head[end - 1] = 0;
    if (strncmp(c->head, "HTTP/1.1 200", 12) != 0) {
        e_status++;
        return -1;
    }
    char *cl = strcasestr(c->head, "\r\ncontent-length:");
    if (!cl) {
        e_read++;
        return -1;
    }
    c->body_left = strtoull(cl + 17, NULL, 10);
    c->in_body = 1;
    size_t extra = c->head_len - end;
    if (extra > c->body_left) {
        e_read++;
        return -1;
    }
    c->body_left -= extra;
    n_bytes += c->head_len;
    return 0;
}

/* an answer was read in full */
static void answered(struct conn *c) {
    n_req++;
    if (mode == BULK) {
        c->st = WRITING;
        c->head_len = 0;
        c->in_body = 0;
        watch(c, EPOLL_CTL_MOD, EPOLLOUT);
        return;
    }
    /* Connection: close; the server closes too. Marked as shut down, or SSL_free
     * would take the session as bad and make it not resumable. */
    SSL_set_shutdown(c->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    restart(c);
}

static void step(struct conn *c) {
    int ret;
    if (c->st == HANDSHAKE) {
        ret = SSL_connect(c->ssl);
        if (ret != 1) {
            if (!wait_io(c, ret)) {
                e_connect++;
                restart(c);
            }
            return;
        }
        n_hs++;
        if (SSL_session_reused(c->ssl))
            n_resumed++;
        c->st = WRITING;
    }
    if (c->st == WRITING) {
        ret = SSL_write(c->ssl, req, req_len);
        if (ret <= 0) {
            if (!wait_io(c, ret)) {
                e_write++;
                restart(c);
            }
            return;
        }
        c->st = READING;
    }
    for (;;) { /* READING */
        size_t n = 0;
        ret = SSL_read_ex(c->ssl, buf, BUF_LEN, &n);
        if (!ret) {
            if (!wait_io(c, 0)) {
                e_read++; /* closed or failed before the answer was complete */
                restart(c);
            }
            return;
        }
        if (c->in_body) {
            if (n > c->body_left) {
                e_read++;
                restart(c);
                return;
            }
            c->body_left -= n;
            n_bytes += n;
        } else {
            size_t room = HEAD_MAX - 1 - c->head_len, take = n < room ? n : room;
            memcpy(c->head + c->head_len, buf, take);
            c->head_len += take;
            c->head[c->head_len] = 0;
            char *end = strstr(c->head, "\r\n\r\n");
            if (!end) {
                if (c->head_len >= HEAD_MAX - 1) {
                    e_read++;
                    restart(c);
                    return;
                }
                continue;
            }
            if (start_body(c, (size_t)(end - c->head) + 4) < 0) {
                restart(c);
                return;
            }
            if (take < n) {
                if (n - take > c->body_left) {
                    e_read++;
                    restart(c);
                    return;
                }
                c->body_left -= n - take;
                n_bytes += n - take;
            }
        }
        if (c->in_body && c->body_left == 0) {
            answered(c);
            return;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: tlsload new|resume|bulk HOST:PORT PATH SECONDS CONNS\n");
        return 2;
    }
    if (!strcmp(argv[1], "new"))
        mode = NEW;
    else if (!strcmp(argv[1], "resume"))
        mode = RESUME;
    else if (!strcmp(argv[1], "bulk"))
        mode = BULK;
    else {
        fprintf(stderr, "tlsload: unknown mode %s\n", argv[1]);
        return 2;
    }
    char host[256];
    snprintf(host, sizeof host, "%s", argv[2]);
    char *colon = strrchr(host, ':');
    if (!colon) {
        fprintf(stderr, "tlsload: HOST:PORT expected\n");
        return 2;
    }
    *colon = 0;
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "tlsload: bad address %s\n", host);
        return 2;
    }
    double secs = atof(argv[4]);
    int nconn = atoi(argv[5]);
    if (nconn < 1)
        nconn = 1;
    req_len = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n", argv[3],
                       mode == BULK ? "" : "Connection: close\r\n");

    ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn - 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    SSL_CTX_set_read_ahead(ctx, 1); /* one recv for as much as is there */
    SSL_CTX_set_default_read_buffer_len(ctx, 64 * 1024);
    const char *cert = getenv("TLSLOAD_CERT"), *key = getenv("TLSLOAD_KEY");
    if (cert && key &&
        (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
         SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)) {
        fprintf(stderr, "tlsload: cannot load the client certificate %s and key %s\n", cert, key);
        return 2;
    }

    ep = epoll_create1(0);
    struct conn *conns = calloc((size_t)nconn, sizeof *conns);
    double t0 = now_s(), end = t0 + secs;
    int opened = 0;
    for (int i = 0; i < nconn; i++) {
        conns[i].fd = -1;
        if (mode == RESUME && i > 0 && !newest)
            continue; /* opened once the first ticket is there */
        if (open_conn(&conns[i]) == 0)
            opened++;
    }
    struct epoll_event evs[256];
    while (now_s() < end) {
        int n = epoll_wait(ep, evs, 256, 50);
        for (int i = 0; i < n; i++)
            step((struct conn *)evs[i].data.ptr);
        if (mode == RESUME && newest && opened < nconn) {
            for (int i = 0; i < nconn; i++)
                if (conns[i].fd < 0 && open_conn(&conns[i]) == 0)
                    opened++;
        }
    }
    double dur = now_s() - t0;
    printf("WRK_RESULT requests=%llu duration_us=%.0f bytes=%llu connect=%llu read=%llu write=%llu status=%llu "
           "timeout=0 handshakes=%llu resumed=%llu\n",
           n_req, dur * 1e6, n_bytes, e_connect, e_read, e_write, e_status, n_hs, n_resumed);
    for (int i = 0; i < nconn; i++)
        close_conn(&conns[i]);
    return 0;
}
