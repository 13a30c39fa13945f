// Command clientcheck drives franz-go (kgo and kadm) for the compat tests
// (tests/compat/test_go_client.py): one JSON request per line on stdin, such as
// {"op": "produce", "topic": "t", "count": 10}; one JSON answer per line on stdout,
// {"ok": true, ...} or {"ok": false, "error": "...", "message": "..."}.
//
//	clientcheck --bootstrap 127.0.0.1:9092
//
// scripts/peers/clients builds it into the peers cache (never into the tree), with its module
// cache there too. Each produce and consume request gets its own client, with franz-go's
// defaults except what the request says; one admin client (kadm) serves the admin requests.
// Topic partitions are written "topic:partition".
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

type request struct {
	Op          string            `json:"op"`
	Topic       string            `json:"topic"`
	Topics      []string          `json:"topics"`
	Count       int               `json:"count"`
	Keys        int               `json:"keys"`
	Unkeyed     bool              `json:"unkeyed"`
	ValuePrefix string            `json:"value_prefix"`
	Idempotent  *bool             `json:"idempotent"` // franz-go's default: true
	Group       string            `json:"group"`
	Groups      []string          `json:"groups"`
	ServerSide  bool              `json:"server_side"` // KIP-848: kgo.ServerSideBalancer
	ClientID    string            `json:"client_id"`
	TimeoutMs   int               `json:"timeout_ms"`
	Partitions  int32             `json:"partitions"`
	Configs     map[string]string `json:"configs"`
	Spec        string            `json:"spec"`
}

type answer map[string]any

type checker struct {
	bootstrap string
	admin     *kadm.Client
	adminKgo  *kgo.Client
}

func tp(topic string, partition int32) string { return fmt.Sprintf("%s:%d", topic, partition) }

func failure(err error) answer {
	a := answer{"ok": false, "error": fmt.Sprintf("%T", err), "message": err.Error()}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		a["kafka_error"] = ke.Message
	}
	return a
}

func (c *checker) timeout(r request) (context.Context, context.CancelFunc) {
	ms := r.TimeoutMs
	if ms <= 0 {
		ms = 30000
	}
	return context.WithTimeout(context.Background(), time.Duration(ms)*time.Millisecond)
}

func (c *checker) versions() (answer, error) {
	a := answer{"go": strings.TrimPrefix(debugGoVersion(), "go")}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if strings.HasPrefix(m.Path, "github.com/twmb/franz-go") {
				a[m.Path] = m.Version
			}
		}
	}
	return a, nil
}

func debugGoVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return info.GoVersion
	}
	return ""
}

// produce sends Count records ("k<i % Keys>" keyed unless Unkeyed, values "<prefix><i>") and
// answers each one's partition and offset, in order.
func (c *checker) produce(r request) (answer, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(c.bootstrap), kgo.ClientID("clientcheck-go-producer"),
		kgo.RecordDeliveryTimeout(20 * time.Second), kgo.ProduceRequestTimeout(10 * time.Second)}
	if r.Idempotent != nil && !*r.Idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	keys, prefix := r.Keys, r.ValuePrefix
	if keys <= 0 {
		keys = 4
	}
	if prefix == "" {
		prefix = "v"
	}
	records := make([]*kgo.Record, r.Count)
	for i := range records {
		rec := &kgo.Record{Topic: r.Topic, Value: fmt.Appendf(nil, "%s%d", prefix, i)}
		if !r.Unkeyed {
			rec.Key = fmt.Appendf(nil, "k%d", i%keys)
		}
		records[i] = rec
	}
	ctx, cancel := c.timeout(r)
	defer cancel()
	if r.Count <= 0 {
		return nil, errors.New("produce: count must be positive")
	}
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		return nil, err
	}
	out := make([][2]int64, len(records))
	for i, rec := range records {
		out[i] = [2]int64{int64(rec.Partition), rec.Offset}
	}
	// The producer id and epoch the batches were written with: -1 when not idempotent.
	return answer{"records": out, "producer_id": records[0].ProducerID,
		"producer_epoch": records[0].ProducerEpoch}, nil
}

// consume joins Group on Topics, polls until Count records (or the timeout), commits what it
// read and answers the records, the assignment and what the group committed.
func (c *checker) consume(r request) (answer, error) {
	var mu sync.Mutex
	assigned := map[string]bool{}
	clientID := r.ClientID
	if clientID == "" {
		clientID = "clientcheck-go-consumer"
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.bootstrap), kgo.ClientID(clientID),
		kgo.ConsumerGroup(r.Group), kgo.ConsumeTopics(r.Topics...), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for t, ps := range m {
				for _, p := range ps {
					assigned[tp(t, p)] = true
				}
			}
		})}
	if r.ServerSide {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close() // leaves the group
	ctx, cancel := c.timeout(r)
	defer cancel()
	var records []answer
	for len(records) < r.Count && ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) && !errors.Is(fe.Err, context.Canceled) {
				return nil, fmt.Errorf("fetch %s: %w", tp(fe.Topic, fe.Partition), fe.Err)
			}
		}
		fetches.EachRecord(func(rec *kgo.Record) {
			records = append(records, answer{"topic": rec.Topic, "p": rec.Partition,
				"o": rec.Offset, "k": string(rec.Key), "v": string(rec.Value)})
		})
	}
	commitCtx, cancelCommit := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelCommit()
	if err := cl.CommitUncommittedOffsets(commitCtx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	committed := map[string]int64{}
	for t, ps := range cl.CommittedOffsets() {
		for p, eo := range ps {
			committed[tp(t, p)] = eo.Offset
		}
	}
	member, generation := cl.GroupMetadata()
	mu.Lock()
	assignment := make([]string, 0, len(assigned))
	for k := range assigned {
		assignment = append(assignment, k)
	}
	mu.Unlock()
	sort.Strings(assignment)
	if records == nil {
		records = []answer{}
	}
	return answer{"records": records, "assignment": assignment, "committed": committed,
		"member_id": member, "generation": generation}, nil
}

func (c *checker) createTopics(r request) (answer, error) {
	ctx, cancel := c.timeout(r)
	defer cancel()
	configs := map[string]*string{}
	for k, v := range r.Configs {
		configs[k] = &v
	}
	partitions := r.Partitions
	if partitions == 0 {
		partitions = -1
	}
	resp, err := c.admin.CreateTopics(ctx, partitions, -1, configs, r.Topics...)
	if err != nil {
		return nil, err
	}
	errs := answer{}
	for _, t := range resp.Sorted() {
		if t.Err != nil {
			errs[t.Topic] = failure(t.Err)
		} else {
			errs[t.Topic] = nil
		}
	}
	return answer{"errors": errs}, nil
}

// listOffsets answers the start ("earliest") or end ("latest") offsets of Topics.
func (c *checker) listOffsets(r request) (answer, error) {
	ctx, cancel := c.timeout(r)
	defer cancel()
	var listed kadm.ListedOffsets
	var err error
	if r.Spec == "earliest" {
		listed, err = c.admin.ListStartOffsets(ctx, r.Topics...)
	} else {
		listed, err = c.admin.ListEndOffsets(ctx, r.Topics...)
	}
	if err != nil {
		return nil, err
	}
	if err := listed.Error(); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	listed.Each(func(o kadm.ListedOffset) { out[tp(o.Topic, o.Partition)] = o.Offset })
	return answer{"offsets": out}, nil
}

func (c *checker) listGroups(r request) (answer, error) {
	ctx, cancel := c.timeout(r)
	defer cancel()
	listed, err := c.admin.ListGroups(ctx)
	if err != nil {
		return nil, err
	}
	out := answer{}
	for _, g := range listed.Sorted() {
		out[g.Group] = answer{"state": g.State, "protocol_type": g.ProtocolType,
			"type": g.GroupType}
	}
	return answer{"groups": out}, nil
}

func (c *checker) describeGroups(r request) (answer, error) {
	ctx, cancel := c.timeout(r)
	defer cancel()
	described, err := c.admin.DescribeGroups(ctx, r.Groups...)
	if err != nil && len(described) == 0 {
		return nil, err
	}
	out := answer{}
	for _, g := range described.Sorted() {
		if g.Err != nil {
			out[g.Group] = failure(g.Err)
			continue
		}
		members := []answer{}
		for _, m := range g.Members {
			var assignment []string
			if ca, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range ca.Topics {
					for _, p := range t.Partitions {
						assignment = append(assignment, tp(t.Topic, p))
					}
				}
			}
			sort.Strings(assignment)
			if assignment == nil {
				assignment = []string{}
			}
			members = append(members, answer{"member_id": m.MemberID, "client_id": m.ClientID,
				"host": m.ClientHost, "assignment": assignment})
		}
		out[g.Group] = answer{"state": g.State, "protocol_type": g.ProtocolType,
			"protocol": g.Protocol, "coordinator": g.Coordinator.NodeID, "members": members}
	}
	return answer{"groups": out}, nil
}

func (c *checker) fetchOffsets(r request) (answer, error) {
	ctx, cancel := c.timeout(r)
	defer cancel()
	fetched, err := c.admin.FetchOffsets(ctx, r.Group)
	if err != nil {
		return nil, err
	}
	if err := fetched.Error(); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	fetched.Each(func(o kadm.OffsetResponse) { out[tp(o.Topic, o.Partition)] = o.At })
	return answer{"offsets": out}, nil
}

func (c *checker) handle(r request) (answer, error) {
	switch r.Op {
	case "versions":
		return c.versions()
	case "produce":
		return c.produce(r)
	case "consume":
		return c.consume(r)
	case "create_topics":
		return c.createTopics(r)
	case "list_offsets":
		return c.listOffsets(r)
	case "list_groups":
		return c.listGroups(r)
	case "describe_groups":
		return c.describeGroups(r)
	case "fetch_offsets":
		return c.fetchOffsets(r)
	}
	return nil, fmt.Errorf("unknown op %q", r.Op)
}

func main() {
	bootstrap := flag.String("bootstrap", "", "host:port of the target")
	flag.Parse()
	if *bootstrap == "" {
		fmt.Fprintln(os.Stderr, "usage: clientcheck --bootstrap HOST:PORT  (requests on stdin)")
		os.Exit(2)
	}
	adminKgo, err := kgo.NewClient(kgo.SeedBrokers(*bootstrap), kgo.ClientID("clientcheck-go-admin"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c := &checker{bootstrap: *bootstrap, admin: kadm.NewClient(adminKgo), adminKgo: adminKgo}
	defer adminKgo.Close()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		var r request
		var a answer
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			a = failure(err)
		} else if res, err := c.handle(r); err != nil {
			a = failure(err)
		} else {
			a = res
			a["ok"] = true
		}
		if err := out.Encode(a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
