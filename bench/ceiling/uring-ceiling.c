/*
 * uring-ceiling: the ceiling responder (ceiling.c) on io_uring instead of epoll, to
 * measure whether another syscall interface lowers the kernel's cost per request
 * (decision 0005). Keep-alive GET only, one request in flight per connection (wrk's
 * default); every completion batch is answered with one io_uring_submit_and_wait.
 * A multishot accept, then per connection: recv SQE -> (complete head) -> send SQE of
 * the same fixed 1,024-byte response as ceiling.c -> recv SQE ...
 *
 * usage: uring-ceiling PORT [FLAGS]   FLAGS: 1 = SINGLE_ISSUER|DEFER_TASKRUN,
 *                                            2 = COOP_TASKRUN, 0 = none
 * build: make uring (needs liburing-dev)
 */
#define _GNU_SOURCE
#include <liburing.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define BODY_LEN 1024
#define RBUF 16384
struct conn { int fd; size_t rlen; char rbuf[RBUF]; };
static char resp[512 + BODY_LEN]; static size_t resp_len;
static struct io_uring ring;
enum { ACCEPT = 1, RECV = 2, SEND = 3 };
#define TAG(p, k) ((__u64)(uintptr_t)(p) | (k))
static struct io_uring_sqe *sqe(void) {
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    if (!s) { io_uring_submit(&ring); s = io_uring_get_sqe(&ring); }
    return s;
}
static void arm_recv(struct conn *c) {
    struct io_uring_sqe *s = sqe();
    io_uring_prep_recv(s, c->fd, c->rbuf + c->rlen, RBUF - c->rlen, 0);
    io_uring_sqe_set_data64(s, TAG(c, RECV));
}
static void arm_send(struct conn *c, size_t n) {
    struct io_uring_sqe *s = sqe();
    /* n responses: for the experiment, requests come one at a time (not pipelined) */
    (void)n;
    io_uring_prep_send(s, c->fd, resp, resp_len, 0);
    io_uring_sqe_set_data64(s, TAG(c, SEND));
}
int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 8090;
    int flags = argc > 2 ? atoi(argv[2]) : 0;
    signal(SIGPIPE, SIG_IGN);
    char date[64]; time_t now = time(NULL); struct tm tm; gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    int n = snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nServer: ceiling\r\nDate: %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n", date, BODY_LEN);
    for (int i = 0; i < BODY_LEN; i++) resp[n + i] = (i % 64 == 63) ? '\n' : (char)('a' + i % 26);
    resp_len = n + BODY_LEN;
    int lfd = socket(AF_INET, SOCK_STREAM, 0); int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (bind(lfd, (void *)&sa, sizeof sa) || listen(lfd, 4096)) { perror("listen"); return 1; }
    struct io_uring_params p = {0};
    if (flags & 1) p.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    if (flags & 2) p.flags |= IORING_SETUP_COOP_TASKRUN;
    int r = io_uring_queue_init_params(4096, &ring, &p);
    if (r) { fprintf(stderr, "init %s\n", strerror(-r)); return 1; }
    struct io_uring_sqe *s = sqe();
    io_uring_prep_multishot_accept(s, lfd, NULL, NULL, 0);
    io_uring_sqe_set_data64(s, ACCEPT);
    printf("uceiling on %d flags %d\n", port, flags); fflush(stdout);
    for (;;) {
        io_uring_submit_and_wait(&ring, 1);
        struct io_uring_cqe *cqe; unsigned head, cnt = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            cnt++;
            __u64 d = cqe->user_data; int res = cqe->res;
            int kind = d & 3; struct conn *c = (struct conn *)(uintptr_t)(d & ~3ULL);
            if (kind == ACCEPT) {
                if (res >= 0) {
                    setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    c = malloc(sizeof *c); c->fd = res; c->rlen = 0; arm_recv(c);
                }
                if (!(cqe->flags & IORING_CQE_F_MORE)) { s = sqe(); io_uring_prep_multishot_accept(s, lfd, NULL, NULL, 0); io_uring_sqe_set_data64(s, ACCEPT); }
            } else if (kind == RECV) {
                if (res <= 0) { close(c->fd); free(c); continue; }
                c->rlen += res;
                size_t nreq = 0, start = 0; char *e;
                while ((e = memmem(c->rbuf + start, c->rlen - start, "\r\n\r\n", 4))) { nreq++; start = e - c->rbuf + 4; }
                if (start) { c->rlen -= start; memmove(c->rbuf, c->rbuf + start, c->rlen); }
                if (nreq) arm_send(c, nreq); else arm_recv(c);
            } else if (kind == SEND) {
                if (res < 0) { close(c->fd); free(c); continue; }
                arm_recv(c);
            }
        }
        io_uring_cq_advance(&ring, cnt);
    }
}
