package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"aggregator/internal/config"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/recompute"
	"aggregator/internal/record"
	"aggregator/internal/registry"
	"aggregator/internal/windowing"
)

// maxLine bounds one input line of replay (a Kafka record is at most ~1 MB
// by default; allow headroom).
const maxLine = 16 << 20

func replayCmd(ctx context.Context, args []string, env []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	path := fs.String("config", "", "config `FILE` (YAML, docs/configuration.md); only source, watermark, window and aggregates matter")
	input := fs.String("input", "", "read records from `FILE` instead of stdin")
	kcat := fs.Bool("kcat", false, "input lines are the JSON that \"kcat -C -J\" prints (partition, offset, ts, key, payload)")
	// Registry formats are binary: each line (or kcat payload) is a value in base64.
	noFlush := fs.Bool("no-flush", false, "at the end of input, leave open windows open instead of firing them")
	if err := parseFlags(fs, args, stderr); err != nil {
		return ignoreHelp(err)
	}
	cfg, err := loadConfig(fs, *path, env)
	if err != nil {
		return err
	}
	in := stdin
	if *input != "" {
		f, err := os.Open(*input)
		if err != nil {
			return fmt.Errorf("%w: replay: %v", errUsage, err)
		}
		defer f.Close()
		in = f
	}
	w := bufio.NewWriterSize(stdout, 1<<16)
	if err := replay(ctx, cfg, in, w, *kcat, !*noFlush, newLogger(cfg.Log, stderr)); err != nil {
		return err
	}
	return w.Flush()
}

// replay runs the pipeline over recorded records and writes what it emits as
// JSON lines (docs/results.md#replays-output). Wall-clock time plays no part: idleness and the
// future guard are off. With a registry format, values are base64 in the
// input (and in the late and dead-letter lines), and their schemas come
// from the configured registry (retried while it cannot be reached, with
// warn lines on log).
func replay(ctx context.Context, cfg config.Config, in io.Reader, w *bufio.Writer, kcat, flush bool, log zerolog.Logger) error {
	out := &replayOutput{w: w, enc: producer.EncoderFor(cfg)}
	var reg *registry.Client
	if cfg.UsesRegistry() {
		out.base64 = true
		var err error
		if reg, err = registry.New(cfg.Source.SchemaRegistry, log, prometheus.NewRegistry()); err != nil {
			return err
		}
	}
	topic := ""
	if len(cfg.Source.Topics) > 0 {
		topic = cfg.Source.Topics[0]
	}
	var inputs []ready.Input
	partitions := []int32{0}
	if kcat {
		// All partitions of a dump are assigned from the start (the engine's
		// semantics, package recompute): the whole dump is read first.
		var err error
		if inputs, err = readKcat(in); err != nil {
			return err
		}
		partitions = partitionsOf(inputs)
	}
	eng, err := recompute.New(cfg, reg, partitions)
	if err != nil {
		return err
	}
	// process decodes a registry value from base64 (a line that is not
	// base64 goes on as it is: a dead letter bad_wire_format).
	process := func(rec *ready.Input) error {
		if reg != nil {
			if v, err := base64.StdEncoding.AppendDecode(nil, rec.Value); err == nil {
				rec.Value = v
			}
		}
		rd, err := eng.Process(ctx, rec)
		if err != nil {
			return err
		}
		// Before the next line (late events and dead letters hold it);
		// most records emit nothing, and then there is no call.
		if len(rd.Outputs) > 0 {
			out.write(&rd)
		}
		return nil
	}
	if kcat {
		for i := range inputs {
			if err := process(&inputs[i]); err != nil {
				return err
			}
		}
	} else {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64<<10), maxLine)
		var offset int64
		var rec ready.Input // one for all lines: a new one per line escapes, an allocation per record
		for sc.Scan() {
			line := bytes.TrimRight(sc.Bytes(), "\r")
			if len(bytes.TrimSpace(line)) == 0 {
				continue // blank lines take no offset
			}
			rec = ready.Input{Topic: topic, Offset: offset, Value: line}
			if err := process(&rec); err != nil {
				return err
			}
			offset++
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read input: %w", err)
		}
	}
	if flush {
		rd := eng.Flush()
		out.write(&rd)
	}
	return out.err
}

// kcatLine is one line of `kcat -C -J`.
type kcatLine struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
	Timestamp int64   `json:"ts"`
	Key       *string `json:"key"`
	Payload   *string `json:"payload"`
}

func readKcat(in io.Reader) ([]ready.Input, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var inputs []ready.Input
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l kcatLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("%w: replay --kcat: line %d: %v", errUsage, n, err)
		}
		rec := ready.Input{Topic: l.Topic, Partition: l.Partition, KafkaPartition: l.Partition, Offset: l.Offset, Timestamp: l.Timestamp}
		if l.Key != nil {
			rec.Key = []byte(*l.Key)
		}
		if l.Payload != nil {
			rec.Value = []byte(*l.Payload)
		}
		inputs = append(inputs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read input: %w", err)
	}
	return inputs, nil
}

func partitionsOf(inputs []ready.Input) []int32 {
	seen := map[int32]bool{}
	var ps []int32
	for _, in := range inputs {
		if !seen[in.Partition] {
			seen[in.Partition] = true
			ps = append(ps, in.Partition)
		}
	}
	return ps
}

// replayOutput writes the pipeline's emissions as the JSON lines of
// docs/results.md#replays-output.
type replayOutput struct {
	base64 bool // values are binary: written in base64, as they were read
	w      *bufio.Writer
	enc    *producer.Encoder
	buf    []byte
	err    error
}

// write writes a Ready's outputs.
func (o *replayOutput) write(rd *ready.Ready) {
	for i := range rd.Outputs {
		out := &rd.Outputs[i]
		switch out.Kind {
		case ready.Result:
			o.Result(&out.Result)
		case ready.Late:
			o.Late(&out.Event.In, out.Event.EventTime, out.Event.Watermark)
		case ready.DeadLetter:
			o.DeadLetter(&out.Event.In, out.Event.Err)
		}
	}
}

func (o *replayOutput) Result(r *windowing.Result) {
	var b []byte
	var n int
	if r.Firing == windowing.Retract { // docs/results.md#replays-output: the key and window of the withdrawn session
		b = append(o.buf[:0], `{"type":"retract"`...)
		n = len(b)
		b = o.enc.AppendKey(b, r)
	} else {
		b = append(o.buf[:0], `{"type":"result"`...)
		n = len(b)
		b = o.enc.AppendResult(b, r)
	}
	b[n] = ',' // join the result's (or key's) fields onto this object
	o.line(b)
}

func (o *replayOutput) Late(in *ready.Input, eventTime, watermark int64) {
	b := append(o.buf[:0], `{"type":"late","partition":`...)
	b = strconv.AppendInt(b, int64(in.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, in.Offset, 10)
	b = append(b, `,"event_time":`...)
	b = strconv.AppendInt(b, eventTime, 10)
	b = append(b, `,"watermark":`...)
	b = strconv.AppendInt(b, watermark, 10)
	o.line(append(o.appendValue(b, in.Value), '}'))
}

// appendValue appends the "value" member: the original line.
func (o *replayOutput) appendValue(b, value []byte) []byte {
	b = append(b, `,"value":`...)
	if o.base64 {
		b = append(b, '"')
		return append(base64.StdEncoding.AppendEncode(b, value), '"')
	}
	return record.AppendQuoted(b, value)
}

func (o *replayOutput) DeadLetter(in *ready.Input, err error) {
	b := append(o.buf[:0], `{"type":"dead_letter","partition":`...)
	b = strconv.AppendInt(b, int64(in.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, in.Offset, 10)
	b = append(b, `,"error":`...)
	b = record.AppendQuoted(b, []byte(err.Error()))
	o.line(append(o.appendValue(b, in.Value), '}'))
}

func (o *replayOutput) line(b []byte) {
	o.buf = b
	if o.err != nil {
		return
	}
	if _, err := o.w.Write(append(b, '\n')); err != nil {
		o.err = fmt.Errorf("write output: %w", err)
	}
}
