// Command h3load is the bench lab's HTTP/3 load generator (case H3): quic-go's
// http3 client, CONNS connections with STREAMS requests in flight on each, GET
// of one URL for SECS seconds after a warm-up, every body read to its end and
// its length checked. It prints h2load's summary lines (bench/lablib.py reads
// them with the same parser). No packaged h2load speaks HTTP/3 (Debian's is
// built without ngtcp2), and oha's http3 feature is an h3 crate build of
// several minutes; quic-go is the client Caddy's own tests use.
//
//	h3load -ca CA.pem [-server-name NAME] [-c CONNS] [-m STREAMS] [-d SECS]
//	       [-warmup SECS] [-length N] [-n 1] URL
//
// -n 1 asks once and exits 0 when the answer is 200 with -length bytes (the
// lab's preflight).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
)

func main() {
	ca := flag.String("ca", "", "CA certificate (PEM) to trust")
	name := flag.String("server-name", "localhost", "TLS server name")
	conns := flag.Int("c", 10, "connections")
	streams := flag.Int("m", 10, "requests in flight per connection")
	secs := flag.Float64("d", 8, "seconds measured")
	warmup := flag.Float64("warmup", 0, "seconds before the measured part")
	length := flag.Int64("length", -1, "the body length every answer must have (-1: any)")
	once := flag.Int("n", 0, "1: one request, checked, then exit")
	flag.Parse()
	if flag.NArg() != 1 {
		fail(fmt.Errorf("want one URL"))
	}
	url := flag.Arg(0)
	pem, err := os.ReadFile(*ca)
	if err != nil {
		fail(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fail(fmt.Errorf("%s: no certificate", *ca))
	}
	tlsConf := &tls.Config{RootCAs: roots, ServerName: *name}
	// Go's transports ask for gzip by themselves; h2load asks for no coding,
	// and neither does this (a proxied answer would be compressed per request).
	newTransport := func() *http3.Transport {
		return &http3.Transport{TLSClientConfig: tlsConf, DisableCompression: true}
	}
	if *once == 1 {
		client := &http.Client{Transport: newTransport(), Timeout: 30 * time.Second}
		n, status, err := get(client, context.Background(), url)
		if err != nil {
			fail(err)
		}
		if status != 200 || (*length >= 0 && n != *length) {
			fail(fmt.Errorf("status %d, %d bytes (want 200, %d)", status, n, *length))
		}
		return
	}
	var counting atomic.Bool
	var done, ok, failed, errored, bytes, maxNs, sumNs atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for c := 0; c < *conns; c++ {
		// One transport per connection: quic-go keeps one QUIC connection
		// per transport and authority.
		client := &http.Client{Transport: newTransport()}
		for s := 0; s < *streams; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					start := time.Now()
					n, status, err := get(client, ctx, url)
					if ctx.Err() != nil {
						return
					}
					if !counting.Load() {
						continue
					}
					took := time.Since(start).Nanoseconds()
					done.Add(1)
					sumNs.Add(took)
					for m := maxNs.Load(); took > m && !maxNs.CompareAndSwap(m, took); m = maxNs.Load() {
					}
					switch {
					case err != nil:
						errored.Add(1)
					case status >= 200 && status < 400 && (*length < 0 || n == *length):
						ok.Add(1)
						bytes.Add(n)
					default:
						failed.Add(1)
					}
				}
			}()
		}
	}
	time.Sleep(time.Duration(*warmup * float64(time.Second)))
	counting.Store(true)
	began := time.Now()
	time.Sleep(time.Duration(*secs * float64(time.Second)))
	counting.Store(false)
	took := time.Since(began).Seconds()
	cancel()
	wg.Wait()
	d := done.Load()
	mean := 0.0
	if d > 0 {
		mean = float64(sumNs.Load()) / float64(d) / 1e6
	}
	fmt.Printf("finished in %.2fs, %.2f req/s, %.2fMB/s\n", took, float64(d)/took, float64(bytes.Load())/took/1e6)
	fmt.Printf("requests: %d total, %d started, %d done, %d succeeded, %d failed, %d errored, 0 timeout\n",
		d, d, d, ok.Load(), failed.Load(), errored.Load())
	fmt.Printf("status codes: %d 2xx, 0 3xx, %d 4xx, 0 5xx\n", ok.Load(), failed.Load())
	fmt.Printf("traffic: %d bytes (%d) total\n", bytes.Load(), bytes.Load())
	fmt.Printf("time for request: 0us %.2fms %.2fms\n", float64(maxNs.Load())/1e6, mean)
}

// get asks for url and reads the body to its end: its length and status.
func get(client *http.Client, ctx context.Context, url string) (int64, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	return n, resp.StatusCode, err
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "h3load:", err)
	os.Exit(1)
}
