package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/peer"
)

// stringList is a repeatable string flag (--listen, --peer, --allow).
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	if s == "" {
		return errors.New("empty value")
	}
	*l = append(*l, s)
	return nil
}

// prefixList is a repeatable flag of IP prefixes (a bare address is a
// prefix of its own).
type prefixList []netip.Prefix

func (l *prefixList) String() string {
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (l *prefixList) Set(s string) error {
	if a, err := netip.ParseAddr(s); err == nil {
		*l = append(*l, netip.PrefixFrom(a, a.BitLen()))
		return nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return fmt.Errorf("%q is neither an IP address nor a prefix such as 10.0.0.0/8", s)
	}
	*l = append(*l, p.Masked())
	return nil
}

// usageError is a bad command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// newFlagSet returns a FlagSet that reports to stderr and prints synopsis
// before the flag list on -h or a parse error.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("aaa-peer "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), synopsis)
		fmt.Fprintln(fs.Output(), "\nflags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; ok is false when the caller must return code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	hintDurations(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false // the flag package already printed the error and usage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// logFlags adds --log-level (default level) and --log-format to fs.
func logFlags(fs *flag.FlagSet, level, format *string, def string) {
	fs.StringVar(level, "log-level", def, "log `level` on stderr: debug, info, warn or error")
	fs.StringVar(format, "log-format", "text", "log `format` on stderr: text (key=value) or json (one object a line)")
}

// newLogger returns a logger on stderr at the named level, in the named
// format (text or json).
func newLogger(stderr io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

// redisLog routes go-redis's own log lines (dial failures, pool errors),
// which it prints on stderr in its own format through a process-wide
// logger, to the command's logger, so that --log-format json keeps stderr
// one JSON object a line.
type redisLog struct{ log *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.log.WarnContext(ctx, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), "component", "go-redis")
}

// eventWriter writes the events of a Bus as JSON lines (client.EventLine)
// from its own goroutine. The subscriber never blocks: when the buffer is full the
// event is dropped and counted.
type eventWriter struct {
	ch      chan client.EventLine
	cancel  func()
	done    chan struct{}
	mu      sync.RWMutex // guards closed against the subscriber's send
	closed  bool
	dropped atomic.Uint64
	w       *bufio.Writer
	f       *os.File // nil for stdout
	err     error
}

const eventBuffer = 8192

// peerLines and clientLines adapt a bus to openEvents.
func peerLines(b *peer.Bus) func(func(client.EventLine)) func() {
	return func(fn func(client.EventLine)) func() {
		return b.Subscribe(func(_ context.Context, e peer.Event) { fn(client.PeerLine(e)) })
	}
}

func clientLines(b *client.Bus) func(func(client.EventLine)) func() {
	return func(fn func(client.EventLine)) func() {
		return b.Subscribe(func(_ context.Context, e client.Event) { fn(e.Line()) })
	}
}

// openEvents starts writing the events of a bus (peerLines, clientLines)
// to path ("-" is stdout; "": none, a nil writer whose methods do nothing).
func openEvents(subscribe func(func(client.EventLine)) func(), path string, stdout io.Writer) (*eventWriter, error) {
	if path == "" {
		return nil, nil
	}
	ew := &eventWriter{ch: make(chan client.EventLine, eventBuffer), done: make(chan struct{})}
	if path == "-" {
		ew.w = bufio.NewWriter(stdout)
	} else {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("--events: %w", err)
		}
		ew.f = f
		ew.w = bufio.NewWriter(f)
	}
	ew.cancel = subscribe(ew.publish)
	go ew.run()
	return ew, nil
}

func (ew *eventWriter) publish(e client.EventLine) {
	ew.mu.RLock()
	defer ew.mu.RUnlock()
	if ew.closed {
		return
	}
	select {
	case ew.ch <- e:
	default:
		ew.dropped.Add(1)
	}
}

func (ew *eventWriter) run() {
	defer close(ew.done)
	enc := json.NewEncoder(ew.w)
	for e := range ew.ch {
		if err := enc.Encode(e); err != nil && ew.err == nil {
			ew.err = err
		}
		if len(ew.ch) == 0 { // caught up: make the file current for tail -f
			if err := ew.w.Flush(); err != nil && ew.err == nil {
				ew.err = err
			}
		}
	}
}

// Dropped returns how many events did not fit in the buffer.
func (ew *eventWriter) Dropped() uint64 {
	if ew == nil {
		return 0
	}
	return ew.dropped.Load()
}

// Close stops listening, writes what is buffered and closes the file.
func (ew *eventWriter) Close() error {
	if ew == nil {
		return nil
	}
	ew.cancel()
	ew.mu.Lock()
	ew.closed = true
	close(ew.ch)
	ew.mu.Unlock()
	<-ew.done
	err := ew.err
	if ferr := ew.w.Flush(); err == nil {
		err = ferr
	}
	if ew.f != nil {
		if cerr := ew.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// writeJSONFile writes v as indented JSON to path ("-" is stdout), through
// a temporary file and a rename so a reader never sees half a report.
func writeJSONFile(path string, v any, stdout io.Writer) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err := stdout.Write(b)
		return err
	}
	return writeFileAtomic(path, b)
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := createTempBeside(path)
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// createTempBeside creates the temporary file writeFileAtomic renames to
// path, in path's directory. Its error names path, the user's, rather
// than the temporary file's random name.
func createTempBeside(path string) (*os.File, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, &os.PathError{Op: "open", Path: path, Err: errors.New("is a directory")}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return tmp, nil
}

// checkReport checks at the start that --report path can be written at
// the end (writeJSONFile), so that a mistyped directory does not cost a
// whole run: it creates and removes the temporary file the report would
// be written through. Like --events, a refusal is a runtime failure
// (exit 1).
func checkReport(path string) error {
	if path == "" || path == "-" {
		return nil
	}
	tmp, err := createTempBeside(path)
	if err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	tmp.Close()
	os.Remove(tmp.Name())
	return nil
}

// parseNameWeight splits "NAME=N" (at the last '=') into NAME and a weight
// N >= 1. Without "=N", the weight is 1 unless needWeight.
func parseNameWeight(s string, needWeight bool) (name string, weight int, err error) {
	i := strings.LastIndexByte(s, '=')
	if i < 0 {
		if needWeight {
			return "", 0, errors.New("want NAME=N")
		}
		if s == "" {
			return "", 0, errors.New("empty name")
		}
		return s, 1, nil
	}
	name, ws := s[:i], s[i+1:]
	if name == "" {
		return "", 0, errors.New("empty name")
	}
	n, err := strconv.Atoi(ws)
	if err != nil || n < 1 || n > loadbalance.MaxWeight {
		return "", 0, fmt.Errorf("weight %q: want an integer from 1 to %d", ws, loadbalance.MaxWeight)
	}
	return name, n, nil
}

// cpuProfileFlag adds --cpuprofile to fs.
func cpuProfileFlag(fs *flag.FlagSet, path *string) {
	fs.StringVar(path, "cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof format), written at exit")
}

// startCPUProfile starts a CPU profile into path ("": none); stop ends
// it and closes the file, logging a failure to write it.
func startCPUProfile(path string, log *slog.Logger) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			log.Error("writing --cpuprofile", "err", err)
		}
	}, nil
}
