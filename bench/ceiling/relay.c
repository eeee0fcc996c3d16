/*
 * relay: the floor of a reverse proxy, used by bench case P. It forwards bytes and
 * does no HTTP at all, so no proxy that parses requests, rewrites heads and pools
 * upstream connections can cost less CPU per request than this on the same machine.
 *
 * - one thread (the kernel's cheap path for a process whose descriptor table no
 *   other thread shares), non-blocking sockets, edge-triggered epoll;
 * - every accepted client gets its own upstream connection, opened at accept and
 *   closed with it: no pool, no lookup, no liveness probe;
 * - whatever one side sends is written to the other as it arrived, one read and
 *   one write per chunk, as a keep-alive proxy does per request and per response
 *   (4 syscalls per proxied request, plus the epoll_wait shared by a batch);
 * - back-pressure: when a write takes less than it was given, the rest waits in
 *   the reader's buffer and that reader stops until the writer's socket drains.
 *
 * usage: relay [HOST:]PORT UPSTREAM      UPSTREAM: HOST:PORT or unix:PATH
 * prints "relay listening on http://HOST:PORT/" once the socket listens.
 * build: gcc -O2 -o relay relay.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BUF 16384
#define MAX_EVENTS 256

/* One direction's end: reads from fd, writes what it read to peer->fd. */
struct side {
    int fd;
    struct side *peer;
    size_t len;  /* bytes read and not yet written to the peer */
    size_t off;  /* of them, already written */
    int blocked; /* the peer's socket was full: wait for it to drain */
    char buf[BUF];
};

static int epfd;
static struct sockaddr_storage up_addr;
static socklen_t up_len;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void parse_addr(const char *spec, struct sockaddr_storage *ss, socklen_t *len) {
    memset(ss, 0, sizeof *ss);
    if (strncmp(spec, "unix:", 5) == 0) {
        struct sockaddr_un *un = (struct sockaddr_un *)ss;
        un->sun_family = AF_UNIX;
        if (strlen(spec + 5) >= sizeof un->sun_path) {
            fprintf(stderr, "relay: unix path too long: %s\n", spec + 5);
            exit(2);
        }
        strcpy(un->sun_path, spec + 5);
        *len = sizeof *un;
        return;
    }
    char host[256] = "127.0.0.1";
    const char *port = spec, *colon = strrchr(spec, ':');
    if (colon) {
        size_t n = (size_t)(colon - spec);
        if (n >= sizeof host) {
            fprintf(stderr, "relay: host too long: %s\n", spec);
            exit(2);
        }
        memcpy(host, spec, n);
        host[n] = 0;
        port = colon + 1;
    }
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    in->sin_family = AF_INET;
    in->sin_port = htons((unsigned short)atoi(port));
    if (inet_pton(AF_INET, host, &in->sin_addr) != 1) {
        fprintf(stderr, "relay: not an IPv4 address: %s\n", host);
        exit(2);
    }
    *len = sizeof *in;
}

static void watch(struct side *s) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = s};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, s->fd, &ev) < 0)
        die("epoll_ctl add");
}

/* Pairs closed during a batch, freed after it: the batch may still hold events
 * that point at them. */
static struct side *closed[2 * MAX_EVENTS];
static int nclosed;

static void close_pair(struct side *s) {
    struct side *p = s->peer;
    if (s->fd < 0)
        return;
    close(s->fd);
    close(p->fd);
    s->fd = p->fd = -1;
    closed[nclosed++] = s;
    closed[nclosed++] = p;
}

/* Writes what `s` holds to its peer. 0: all written; 1: the peer is full; -1: error. */
static int flush(struct side *s) {
    while (s->off < s->len) {
        ssize_t w = send(s->peer->fd, s->buf + s->off, s->len - s->off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return s->blocked = 1;
            return -1;
        }
        s->off += (size_t)w;
    }
    s->off = s->len = 0;
    s->blocked = 0;
    return 0;
}

/* Moves what `s`'s socket has to its peer, until the socket is empty or the peer full.
 * Returns -1 when the pair must close. */
static int pump(struct side *s) {
    for (;;) {
        if (s->len > 0) {
            int f = flush(s);
            if (f != 0)
                return f < 0 ? -1 : 0;
        }
        ssize_t r = recv(s->fd, s->buf, BUF, 0);
        if (r > 0) {
            s->len = (size_t)r;
            if (r < BUF) { /* a short read emptied the socket: write and wait */
                int f = flush(s);
                return f < 0 ? -1 : 0;
            }
            continue;
        }
        if (r == 0)
            return -1;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN ? 0 : -1;
    }
}

static void accept_all(int lfd) {
    for (;;) {
        int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                return;
            die("accept4");
        }
        int ufd = socket(up_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (ufd < 0)
            die("socket");
        /* blocking connect: at accept, once per client connection, not per request */
        if (connect(ufd, (struct sockaddr *)&up_addr, up_len) < 0) {
            perror("relay: connect to the upstream");
            close(ufd);
            close(cfd);
            continue;
        }
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (up_addr.ss_family == AF_INET)
            setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (fcntl(ufd, F_SETFL, O_NONBLOCK) < 0)
            die("fcntl");
        struct side *c = calloc(1, sizeof *c), *u = calloc(1, sizeof *u);
        if (!c || !u)
            die("calloc");
        c->fd = cfd;
        u->fd = ufd;
        c->peer = u;
        u->peer = c;
        watch(c);
        watch(u);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: relay [HOST:]PORT UPSTREAM   (UPSTREAM: HOST:PORT or unix:PATH)\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_storage ls;
    socklen_t ll;
    parse_addr(argv[1], &ls, &ll);
    if (ls.ss_family != AF_INET) {
        fprintf(stderr, "relay: listens on TCP only\n");
        return 2;
    }
    parse_addr(argv[2], &up_addr, &up_len);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&ls, ll) < 0)
        die("bind");
    if (listen(lfd, 1024) < 0)
        die("listen");
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        die("epoll_create1");
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) < 0)
        die("epoll_ctl listen");
    char host[INET_ADDRSTRLEN];
    struct sockaddr_in *in = (struct sockaddr_in *)&ls;
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    printf("relay listening on http://%s:%d/\n", host, ntohs(in->sin_port));
    fflush(stdout);

    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(epfd, evs, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct side *s = evs[i].data.ptr;
            if (!s) {
                accept_all(lfd);
                continue;
            }
            if (s->fd < 0)
                continue;
            unsigned e = evs[i].events;
            /* the peer's socket drained: send what waited for it */
            if ((e & EPOLLOUT) && s->peer->blocked && pump(s->peer) < 0) {
                close_pair(s);
                continue;
            }
            if ((e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !s->blocked && pump(s) < 0)
                close_pair(s);
        }
        for (int i = 0; i < nclosed; i++)
            free(closed[i]);
        nclosed = 0;
    }
}
