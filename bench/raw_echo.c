/*
 * raw_echo.c - the baseline of bench/raw_vs_echo.py: a bare Unix-socket
 * server that reads messages of a fixed size and writes each one back, one
 * blocking thread per connection. It does what the raw protocol's headerless
 * mode does minus inference, so `infd perf` can drive both the same way.
 *
 *   cc -O2 -o raw_echo bench/raw_echo.c -lpthread && ./raw_echo /tmp/echo.sock 602112
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static size_t msg_bytes;

static void *serve(void *arg)
{
    int fd = (int)(long)arg;
    char *buf = malloc(msg_bytes);
    for (; buf;) {
        size_t got = 0, sent = 0;
        while (got < msg_bytes) {
            ssize_t k = read(fd, buf + got, msg_bytes - got);
            if (k <= 0)
                goto out;
            got += (size_t)k;
        }
        while (sent < msg_bytes) {
            ssize_t k = write(fd, buf + sent, msg_bytes - sent);
            if (k <= 0)
                goto out;
            sent += (size_t)k;
        }
    }
out:
    close(fd);
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: raw_echo PATH MESSAGE_BYTES\n");
        return 2;
    }
    msg_bytes = strtoull(argv[2], NULL, 10);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", argv[1]);
    unlink(argv[1]);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 128) != 0) {
        perror(argv[1]);
        return 1;
    }
    for (;;) {
        int fd = accept(l, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_t t;
        if (pthread_create(&t, NULL, serve, (void *)(long)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
}
