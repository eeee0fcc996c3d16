/*
 * sink: a load client for large responses that costs (almost) nothing per byte.
 *
 * wrk reads bodies through an 8 KiB buffer and parses every byte: on a 100 MiB file
 * it saturates its core long before the server does. sink discards body bytes in
 * the kernel with recv(MSG_TRUNC) (TCP drops them without copying), so the server's
 * sendfile path is what limits the transfer.
 *
 * usage: sink HOST:PORT PATH SECONDS [CONNS]
 * Each of CONNS keep-alive connections loops: GET PATH, read the head, check the
 * status (200) and Content-Length, discard the body, repeat, until SECONDS pass.
 * Prints the same line as the Lua scripts in bench/wrk/:
 *   WRK_RESULT requests=N duration_us=N bytes=N connect=N read=N write=N status=N timeout=N
 * build: gcc -O2 -o sink sink.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX 8192

struct conn {
    int fd;
    int in_body;
    size_t head_len;
    unsigned long long body_left;
    char head[HEAD_MAX];
};

static struct sockaddr_in addr;
static char req[1024];
static size_t req_len;
static unsigned long long n_req, n_bytes, e_connect, e_read, e_write, e_status;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int open_conn(struct conn *c) {
    c->fd = socket(AF_INET, SOCK_STREAM, 0); /* blocking connect, then non-blocking */
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        e_connect++;
        return -1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->in_body = 0;
    c->head_len = 0;
    return 0;
}

static int send_req(struct conn *c) {
    /* the request is tiny: one write goes through on an idle keep-alive connection */
    ssize_t w = write(c->fd, req, req_len);
    if (w != (ssize_t)req_len) {
        e_write++;
        return -1;
    }
    return 0;
}

/* parse the head in c->head; returns 1 when complete, 0 when more is needed, -1 bad */
static int parse_head(struct conn *c) {
    char *end = memmem(c->head, c->head_len, "\r\n\r\n", 4);
    if (!end)
        return c->head_len == HEAD_MAX ? -1 : 0;
    size_t hl = (size_t)(end - c->head) + 4;
    if (c->head_len < 12 || memcmp(c->head + 9, "200", 3) != 0)
        e_status++;
    unsigned long long cl = 0;
    int have_cl = 0;
    for (char *p = c->head; p < end; p++) {
        if ((p == c->head || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0) {
            cl = strtoull(p + 15, NULL, 10);
            have_cl = 1;
            break;
        }
    }
    if (!have_cl)
        return -1;
    size_t extra = c->head_len - hl; /* body bytes read together with the head */
    n_bytes += hl;
    if (extra > cl)
        return -1; /* pipelining is not used: more than one response is a protocol error */
    n_bytes += extra;
    c->body_left = cl - extra;
    c->in_body = 1;
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: sink HOST:PORT PATH SECONDS [CONNS]\n");
        return 2;
    }
    char host[64];
    const char *colon = strrchr(argv[1], ':');
    if (!colon || (size_t)(colon - argv[1]) >= sizeof host) {
        fprintf(stderr, "sink: HOST:PORT expected\n");
        return 2;
    }
    memcpy(host, argv[1], (size_t)(colon - argv[1]));
    host[colon - argv[1]] = 0;
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "sink: bad IPv4 address %s\n", host);
        return 2;
    }
    double secs = atof(argv[3]);
    int nconn = argc > 4 ? atoi(argv[4]) : 4;
    if (nconn < 1 || nconn > 64)
        nconn = 4;
    req_len = (size_t)snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", argv[2], argv[1]);

    int ep = epoll_create1(0);
    struct conn *cs = calloc((size_t)nconn, sizeof *cs);
    double t0 = now_s(), deadline = t0 + secs;
    for (int i = 0; i < nconn; i++) {
        if (open_conn(&cs[i]) < 0 || send_req(&cs[i]) < 0) {
            fprintf(stderr, "sink: cannot connect to %s\n", argv[1]);
            return 1;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
    }
    struct epoll_event evs[64];
    while (now_s() < deadline) {
        int n = epoll_wait(ep, evs, 64, 100);
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            ssize_t r;
            if (!c->in_body) {
                r = recv(c->fd, c->head + c->head_len, HEAD_MAX - c->head_len, MSG_DONTWAIT);
            } else {
                size_t want = c->body_left > (1u << 30) ? (1u << 30) : (size_t)c->body_left;
                r = recv(c->fd, NULL, want, MSG_DONTWAIT | MSG_TRUNC);
            }
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            int bad = 0;
            if (r <= 0) {
                e_read++;
                bad = 1;
            } else if (!c->in_body) {
                c->head_len += (size_t)r;
                int p = parse_head(c);
                if (p < 0) {
                    e_read++;
                    bad = 1;
                }
            } else {
                c->body_left -= (unsigned long long)r;
                n_bytes += (unsigned long long)r;
            }
            if (!bad && c->in_body && c->body_left == 0) {
                n_req++;
                c->in_body = 0;
                c->head_len = 0;
                if (now_s() < deadline && send_req(c) < 0)
                    bad = 1;
            }
            if (bad) { /* reconnect and go on, as wrk does */
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                if (open_conn(c) < 0 || send_req(c) < 0)
                    goto out;
                struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
            }
        }
    }
out:;
    double dur = now_s() - t0;
    printf("WRK_RESULT requests=%llu duration_us=%.0f bytes=%llu connect=%llu read=%llu write=%llu status=%llu timeout=0\n",
           n_req, dur * 1e6, n_bytes, e_connect, e_read, e_write, e_status);
    return 0;
}
