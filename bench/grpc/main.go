// The gRPC server of the lab's case GR (and its check client): grpc-go with a
// codec that passes the messages' bytes as they are, so no generated code is
// needed and the server does the least work per call (what is measured is the
// front server in between).
//
//	grpc serve PORT    serves on 127.0.0.1:PORT (h2c), prints "listening PORT"
//	grpc check ADDR    one unary call and one server stream through ADDR (h2c);
//	                   exit 0 when both came back whole with status OK
//
// Methods: /bench.Echo/Unary answers the request's bytes; /bench.Echo/Stream
// answers STREAM_MESSAGES messages of 1 KiB.
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// StreamMessages is how many 1 KiB messages a server stream carries.
const StreamMessages = 100

// raw passes a message's bytes through as they are.
type raw struct{}

func (raw) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (raw) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (raw) Name() string { return "proto" }

var kib = bytes.Repeat([]byte("x"), 1024)

func unary(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var msg []byte
	if err := dec(&msg); err != nil {
		return nil, err
	}
	return &msg, nil
}

func stream(_ any, s grpc.ServerStream) error {
	var msg []byte
	if err := s.RecvMsg(&msg); err != nil {
		return err
	}
	for i := 0; i < StreamMessages; i++ {
		if err := s.SendMsg(&kib); err != nil {
			return err
		}
	}
	return nil
}

var service = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Unary", Handler: unary}},
	Streams:     []grpc.StreamDesc{{StreamName: "Stream", Handler: stream, ServerStreams: true}},
}

func serve(port string) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		return err
	}
	s := grpc.NewServer(grpc.ForceServerCodec(raw{}), grpc.MaxConcurrentStreams(1000))
	s.RegisterService(&service, struct{}{})
	fmt.Println("listening", l.Addr().(*net.TCPAddr).Port)
	return s.Serve(l)
}

func check(addr string) error {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(raw{})))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in := []byte("hello")
	var out []byte
	if err := conn.Invoke(ctx, "/bench.Echo/Unary", &in, &out); err != nil {
		return fmt.Errorf("unary: %w", err)
	}
	if !bytes.Equal(in, out) {
		return fmt.Errorf("unary: answered %q", out)
	}
	desc := &grpc.StreamDesc{StreamName: "Stream", ServerStreams: true}
	s, err := conn.NewStream(ctx, desc, "/bench.Echo/Stream")
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if err := s.SendMsg(&in); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if err := s.CloseSend(); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	n := 0
	for {
		var msg []byte
		err := s.RecvMsg(&msg)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("stream: after %d messages: %w", n, err)
		}
		if len(msg) != len(kib) {
			return fmt.Errorf("stream: a message of %d bytes", len(msg))
		}
		n++
	}
	if n != StreamMessages {
		return fmt.Errorf("stream: %d messages, not %d", n, StreamMessages)
	}
	return nil
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: grpc serve PORT | grpc check HOST:PORT")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2])
	case "check":
		err = check(os.Args[2])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc:", err)
		os.Exit(1)
	}
}
