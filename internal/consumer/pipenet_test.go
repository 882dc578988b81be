package consumer

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// pipeNet is an in-memory network for kfake and the Kafka clients of a
// test in a testing/synctest bubble: a listener's Accept and a
// connection's reads wait on channels made in the bubble (net.Pipe), so a
// goroutine waiting on one is durably blocked and the bubble's clock
// moves on, which it never does while a goroutine waits on a socket.
type pipeNet struct {
	mu   sync.Mutex
	ls   map[string]*pipeListener
	port int
}

// listen is kfake's ListenFn: a listener on a port of its own.
func (n *pipeNet) listen(_, address string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ls == nil {
		n.ls = map[string]*pipeListener{}
	}
	if port == "0" {
		n.port++
		port = fmt.Sprint(n.port)
	}
	addr := net.JoinHostPort(host, port)
	if n.ls[addr] != nil {
		return nil, fmt.Errorf("listen %s: address in use", addr)
	}
	l := &pipeListener{n: n, addr: pipeAddr(addr), conns: make(chan net.Conn), done: make(chan struct{})}
	n.ls[addr] = l
	return l, nil
}

// dial is the clients' kgo.Dialer: a connection to the listener on
// address, refused if there is none.
func (n *pipeNet) dial(ctx context.Context, _, address string) (net.Conn, error) {
	n.mu.Lock()
	l := n.ls[address]
	n.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("dial %s: connection refused", address)
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, fmt.Errorf("dial %s: connection refused", address)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeListener struct {
	n     *pipeNet
	addr  pipeAddr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		delete(l.n.ls, string(l.addr))
		l.n.mu.Unlock()
	})
	return nil
}

func (l *pipeListener) Addr() net.Addr { return l.addr }

// pipeAddr is a listener's address, host:port as kfake advertises it.
type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }
