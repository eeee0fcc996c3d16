// Command h3-go-client is hayate's second HTTP/3 client in tests (quic-go's
// http3, an implementation of its own beside aioquic): the requests given
// on the command line, one after another on one connection, and what came
// back as one JSON line each.
//
//	h3-go-client -ca CA.pem [-server-name NAME] METHOD URL [BODYFILE|-] ...
//
// A request is METHOD URL and a body file ("-" for none).
package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/quic-go/quic-go/http3"
)

type answer struct {
	Status int               `json:"status"`
	Proto  string            `json:"proto"`
	Length int               `json:"length"`
	Sha256 string            `json:"sha256"`
	Body   string            `json:"body,omitempty"`
	Header map[string]string `json:"headers"`
}

func main() {
	ca := flag.String("ca", "", "CA certificate (PEM) to trust")
	name := flag.String("server-name", "localhost", "TLS server name")
	flag.Parse()
	args := flag.Args()
	if len(args)%3 != 0 || len(args) == 0 {
		fail(fmt.Errorf("want METHOD URL BODYFILE|- triples, got %q", args))
	}
	pem, err := os.ReadFile(*ca)
	if err != nil {
		fail(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fail(fmt.Errorf("%s: no certificate", *ca))
	}
	transport := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: *name}}
	defer transport.Close()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	for i := 0; i < len(args); i += 3 {
		var body io.Reader
		if args[i+2] != "-" {
			data, err := os.ReadFile(args[i+2])
			if err != nil {
				fail(err)
			}
			body = bytes.NewReader(data)
		}
		req, err := http.NewRequest(args[i], args[i+1], body)
		if err != nil {
			fail(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			fail(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			fail(err)
		}
		sum := sha256.Sum256(data)
		a := answer{Status: resp.StatusCode, Proto: resp.Proto, Length: len(data), Sha256: hex.EncodeToString(sum[:]), Header: map[string]string{}}
		if len(data) <= 4096 {
			a.Body = string(data)
		}
		for k := range resp.Header {
			a.Header[k] = resp.Header.Get(k)
		}
		line, _ := json.Marshal(a)
		fmt.Println(string(line))
	}
}

func fail(err error) {
	line, _ := json.Marshal(map[string]string{"error": err.Error()})
	fmt.Println(string(line))
	os.Exit(1)
}
