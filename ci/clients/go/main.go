// franz-go against kaas: an idempotent producer (franz-go's default), a group consumer that
// commits, and GroupTransactSession, franz-go's exactly-once consume-transform-produce, copying
// one topic into another; then a read_committed reader checks that every input record was
// copied exactly once and that the group's committed offsets cover the input; then its share
// consumer (share.go).
//
//	go run . BOOTSTRAP            the whole check
//	go run . BOOTSTRAP copy N     only the copier, for N input records (ci/kills.sh runs it
//	                              while it kills brokers)
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const partitions = 3

var run = strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 36)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAILED: "+format+"\n", args...)
	os.Exit(1)
}

func must(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

func client(bootstrap string, opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...)}, opts...)...)
	must(err, "new client")
	return cl
}

func main() {
	bootstrap := os.Args[1]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if len(os.Args) > 3 && os.Args[2] == "copy" {
		n, err := strconv.Atoi(os.Args[3])
		must(err, "copy N")
		copyExactlyOnce(ctx, bootstrap, n)
		return
	}
	produceAndConsume(ctx, bootstrap)
	commits := copyExactlyOnce(ctx, bootstrap, 300)
	epochBumpedPerCommit(ctx, bootstrap, commits)
	shareConsume(ctx, bootstrap)
	fmt.Println("franz-go: idempotent produce, group consume and commit, GroupTransactSession copy exactly once, share groups")
}

func createTopics(ctx context.Context, bootstrap string, names ...string) {
	cl := client(bootstrap)
	defer cl.Close()
	created, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, 1, nil, names...)
	must(err, "create topics")
	for _, t := range created {
		must(t.Err, "create "+t.Topic)
	}
}

func produceAndConsume(ctx context.Context, bootstrap string) {
	topic, group, count := "franz-plain-"+run, "franz-group-"+run, 500
	createTopics(ctx, bootstrap, topic)
	producer := client(bootstrap, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	for i := 0; i < count; i++ {
		producer.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("v%d", i))}, func(r *kgo.Record, err error) {
			must(err, "produce")
		})
	}
	must(producer.Flush(ctx), "flush")
	producer.Close()

	consumer := client(bootstrap, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	for len(seen) < count && ctx.Err() == nil {
		fetches := consumer.PollFetches(ctx)
		fetches.EachError(func(t string, p int32, err error) { fail("fetch %s/%d: %v", t, p, err) })
		fetches.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
		must(consumer.CommitUncommittedOffsets(ctx), "commit")
	}
	consumer.Close()
	if len(seen) != count {
		fail("the group read %d of %d records", len(seen), count)
	}
	admin := kadm.NewClient(client(bootstrap))
	defer admin.Close()
	offsets, err := admin.FetchOffsets(ctx, group)
	must(err, "fetch offsets")
	var total int64
	offsets.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != int64(count) {
		fail("committed offsets add up to %d, not %d", total, count)
	}
}

// copyExactlyOnce writes n records to a fresh input topic, copies them with a
// GroupTransactSession, and checks the copy with a read_committed reader.
func copyExactlyOnce(ctx context.Context, bootstrap string, n int) (commits int) {
	in, out, group := "franz-in-"+run, "franz-out-"+run, "franz-copier-"+run
	createTopics(ctx, bootstrap, in, out)
	producer := client(bootstrap, kgo.DefaultProduceTopic(in))
	for i := 0; i < n; i++ {
		producer.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("in%d", i))}, func(r *kgo.Record, err error) {
			must(err, "produce input")
		})
	}
	must(producer.Flush(ctx), "flush input")
	producer.Close()

	session, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.TransactionalID("franz-copier-"+run), kgo.ConsumerGroup(group), kgo.ConsumeTopics(in),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RequireStableFetchOffsets(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DefaultProduceTopic(out))
	must(err, "new transact session")
	copied := 0
	for copied < n && ctx.Err() == nil {
		fetches := session.PollFetches(ctx)
		if fetches.Empty() {
			continue
		}
		must(session.Begin(), "begin")
		var records []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) {
			records = append(records, &kgo.Record{Value: append([]byte("copy-"), r.Value...), Partition: r.Partition})
		})
		for _, r := range records {
			session.Produce(ctx, r, nil)
		}
		committed, err := session.End(ctx, kgo.TryCommit)
		must(err, "end transaction")
		if committed {
			copied += len(records)
			commits++
		}
	}
	session.Close()

	reader := client(bootstrap, kgo.ConsumeTopics(out), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer reader.Close()
	var values []string
	quiet := time.Now()
	for time.Since(quiet) < 3*time.Second && ctx.Err() == nil {
		poll, stop := context.WithTimeout(ctx, 500*time.Millisecond)
		fetches := reader.PollFetches(poll)
		stop()
		fetches.EachRecord(func(r *kgo.Record) {
			values = append(values, string(r.Value))
			quiet = time.Now()
		})
	}
	sort.Strings(values)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("copy-in%d", i)
	}
	sort.Strings(want)
	if strings.Join(values, ",") != strings.Join(want, ",") {
		fail("read_committed read %d copies of %d input records (duplicates or losses)", len(values), n)
	}
	fmt.Printf("franz-go GroupTransactSession: %d records copied exactly once\n", n)
	return commits
}

// epochBumpedPerCommit checks that the copier ran on transactions v2 (KIP-890 part 2), which
// franz-go takes when the broker finalizes transaction.version 2, as kaas does by default:
// every EndTxn bumped the producer epoch, so it is at least the number of commits.
func epochBumpedPerCommit(ctx context.Context, bootstrap string, commits int) {
	adm := kadm.NewClient(client(bootstrap))
	defer adm.Close()
	described, err := adm.DescribeTransactions(ctx, "franz-copier-"+run)
	must(err, "describe the copier's transaction")
	d, ok := described["franz-copier-"+run]
	if !ok || d.Err != nil {
		fail("the copier's transactional id is not described: %v", d.Err)
	}
	if int(d.ProducerEpoch) < commits {
		fail("epoch %d after %d commits: the copier did not use transactions v2", d.ProducerEpoch, commits)
	}
	fmt.Printf("franz-go: transactions v2, epoch %d after %d commits\n", d.ProducerEpoch, commits)
}
