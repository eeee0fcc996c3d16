/*
 * ceiling: the smallest HTTP/1.1 responder we can write, used as the floor of the
 * bench lab. No server that parses requests and serves files can cost less CPU per
 * request than this on the same machine.
 *
 * - one thread, non-blocking sockets, level-triggered epoll;
 * - keep-alive: a connection stays open until the peer closes it;
 * - pipelining: every complete request in the read buffer (terminated by
 *   "\r\n\r\n") is answered, in order, with one writev of N copies of a fixed
 *   response (200, 1,024-byte body); request bodies are not supported (GET only);
 * - back-pressure: while a connection has unsent bytes it is not read.
 *
 * usage: ceiling [HOST:]PORT      (default host 127.0.0.1)
 *        ceiling unix:PATH       (a Unix stream socket; an old socket file is replaced)
 * With CEILING_ACCEL=/URI in the environment, every answer is instead an empty 200
 * carrying `X-Accel-Redirect: /URI` (an app handing a file back to its front server).
 * prints "ceiling listening on http://HOST:PORT/" (or "on unix:PATH") once the socket
 * listens. As an upstream it measures what a proxy costs on top of a free app.
 * build: gcc -O2 -o ceiling ceiling.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define BODY_LEN 1024
#define RBUF 16384
#define MAX_EVENTS 256
#define MAX_IOV 512

struct conn {
    int fd;
    size_t rlen;          /* bytes in rbuf */
    size_t scanned;       /* bytes of rbuf already searched for a terminator */
    size_t pending;       /* response bytes still to write */
    char rbuf[RBUF];
};

static char resp[512 + BODY_LEN];
static size_t resp_len;
static int epfd;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void build_response(void) {
    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    const char *accel = getenv("CEILING_ACCEL");
    if (accel && strlen(accel) < 256) {
        int n = snprintf(resp, sizeof resp,
                         "HTTP/1.1 200 OK\r\n"
                         "Server: ceiling\r\n"
                         "Date: %s\r\n"
                         "X-Accel-Redirect: %s\r\n"
                         "Content-Disposition: attachment\r\n"
                         "Content-Length: 0\r\n"
                         "Connection: keep-alive\r\n"
                         "\r\n",
                         date, accel);
        resp_len = (size_t)n;
        return;
    }
    int n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 200 OK\r\n"
                     "Server: ceiling\r\n"
                     "Date: %s\r\n"
                     "Content-Type: text/plain\r\n"
                     "Content-Length: %d\r\n"
                     "Connection: keep-alive\r\n"
                     "\r\n",
                     date, BODY_LEN);
    for (int i = 0; i < BODY_LEN; i++)
        resp[n + i] = (i % 64 == 63) ? '\n' : (char)('a' + i % 26);
    resp_len = (size_t)n + BODY_LEN;
}

static void conn_close(struct conn *c) {
    close(c->fd); /* closing removes it from the epoll set */
    free(c);
}

static void set_interest(struct conn *c, unsigned events) {
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die("epoll_ctl mod");
}

/* Write as much of the pending responses as the socket takes.
 * Returns 0 when everything was written, 1 when the socket is full, -1 on error. */
static int flush_pending(struct conn *c) {
    struct iovec iov[MAX_IOV];
    while (c->pending > 0) {
        size_t left = c->pending;
        int n = 0;
        size_t first = left % resp_len;
        if (first == 0)
            first = resp_len;
        iov[n].iov_base = resp + (resp_len - first);
        iov[n].iov_len = first;
        n++;
        left -= first;
        while (left > 0 && n < MAX_IOV) {
            iov[n].iov_base = resp;
            iov[n].iov_len = resp_len;
            n++;
            left -= resp_len;
        }
        ssize_t w = writev(c->fd, iov, n);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 1;
            if (errno == EINTR)
                continue;
            return -1;
        }
        c->pending -= (size_t)w;
    }
    return 0;
}

/* Count complete requests in rbuf, drop them, queue one response each. */
static int parse_requests(struct conn *c) {
    size_t start = 0, nreq = 0;
    size_t from = c->scanned > 3 ? c->scanned - 3 : 0;
    for (;;) {
        if (from < start)
            from = start;
        char *end = memmem(c->rbuf + from, c->rlen - from, "\r\n\r\n", 4);
        if (!end)
            break;
        nreq++;
        start = (size_t)(end - c->rbuf) + 4;
        from = start;
    }
    if (start > 0) {
        c->rlen -= start;
        if (c->rlen)
            memmove(c->rbuf, c->rbuf + start, c->rlen);
    }
    c->scanned = c->rlen;
    c->pending += nreq * resp_len;
    if (c->rlen == RBUF)
        return -1; /* a request head larger than the buffer */
    return 0;
}

static void on_readable(struct conn *c) {
    for (;;) {
        ssize_t r = read(c->fd, c->rbuf + c->rlen, RBUF - c->rlen);
        if (r == 0) {
            conn_close(c);
            return;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            conn_close(c);
            return;
        }
        c->rlen += (size_t)r;
        break; /* level-triggered: one read per wake-up is enough */
    }
    if (parse_requests(c) < 0) {
        conn_close(c);
        return;
    }
    int f = flush_pending(c);
    if (f < 0) {
        conn_close(c);
    } else if (f == 1) {
        set_interest(c, EPOLLOUT); /* stop reading until the peer drains */
    }
}

static void on_writable(struct conn *c) {
    int f = flush_pending(c);
    if (f < 0) {
        conn_close(c);
    } else if (f == 0) {
        set_interest(c, EPOLLIN);
    }
}

static void on_accept(int lfd) {
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return; /* EAGAIN, or EMFILE & co: try again on the next wake-up */
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = malloc(sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->rlen = c->scanned = c->pending = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            free(c);
        }
    }
}

static int listen_tcp(const char *arg) {
    char host[64] = "127.0.0.1";
    const char *colon = strrchr(arg, ':');
    int port;
    if (colon) {
        size_t hl = (size_t)(colon - arg);
        if (hl >= sizeof host)
            hl = sizeof host - 1;
        memcpy(host, arg, hl);
        host[hl] = 0;
        port = atoi(colon + 1);
    } else {
        port = atoi(arg);
    }
    if (port <= 0 || port > 65535) {
        fprintf(stderr, "usage: ceiling [HOST:]PORT | unix:PATH\n");
        exit(2);
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "ceiling: bad IPv4 address %s\n", host);
        exit(2);
    }
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0)
        die("bind");
    if (listen(lfd, 4096) < 0)
        die("listen");
    printf("ceiling listening on http://%s:%d/\n", host, port);
    fflush(stdout);
    return lfd;
}

static int listen_unix(const char *path) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "ceiling: socket path too long: %s\n", path);
        exit(2);
    }
    strcpy(sa.sun_path, path);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        die("socket");
    unlink(path);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0)
        die("bind");
    if (listen(lfd, 4096) < 0)
        die("listen");
    printf("ceiling listening on unix:%s\n", path);
    fflush(stdout);
    return lfd;
}

int main(int argc, char **argv) {
    const char *arg = argc > 1 ? argv[1] : "127.0.0.1:8090";
    signal(SIGPIPE, SIG_IGN);
    build_response();
    int lfd = strncmp(arg, "unix:", 5) == 0 ? listen_unix(arg + 5) : listen_tcp(arg);

    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        die("epoll_create1");
    static int listen_tag; /* data.ptr == &listen_tag marks the listener */
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listen_tag};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) < 0)
        die("epoll_ctl add listener");


    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(epfd, evs, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &listen_tag) {
                on_accept(lfd);
                continue;
            }
            struct conn *c = evs[i].data.ptr;
            if (evs[i].events & (EPOLLERR | EPOLLHUP)) {
                conn_close(c);
            } else if (evs[i].events & EPOLLOUT) {
                on_writable(c);
            } else if (evs[i].events & EPOLLIN) {
                on_readable(c);
            }
        }
    }
}
