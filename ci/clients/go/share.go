// franz-go's share consumer (kgo.ShareGroup, KIP-932) against kaas:
//
//  1. three clients of one share group on a topic of three partitions, records accepted when
//     the next poll finalizes them: every record delivered, none held by two clients at once;
//  2. explicit acknowledgements with strict record limits (ShareFetch v2's record_limit):
//     released records come back with a higher delivery count, accepted and rejected ones never;
//  3. AckRenew (KIP-1222, ShareAcknowledge v2): with the group's lock at 3 s, a record renewed
//     every second for 9 s stays with its holder while the records it did not renew are
//     delivered again once their locks run out.
package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const shareRecords = 300

func shareConsume(ctx context.Context, bootstrap string) {
	shareSharing(ctx, bootstrap, "franz-share-implicit-"+run)
	shareExplicit(ctx, bootstrap, "franz-share-explicit-"+run)
	shareRenew(ctx, bootstrap, "franz-share-renew-"+run)
}

// prepareShare makes topic name with n records v0..v(n-1) over its partitions, and sets the
// group of the same name to start at the beginning (and its lock duration, when lockMs > 0).
func prepareShare(ctx context.Context, bootstrap, name string, parts int32, lockMs int) {
	cl := client(bootstrap)
	defer cl.Close()
	create := kmsg.NewPtrCreateTopicsRequest()
	topic := kmsg.NewCreateTopicsRequestTopic()
	topic.Topic, topic.NumPartitions, topic.ReplicationFactor = name, parts, 1
	create.Topics = append(create.Topics, topic)
	created, err := create.RequestWith(ctx, cl)
	must(err, "create "+name)
	if code := created.Topics[0].ErrorCode; code != 0 {
		fail("create %s: error %d", name, code)
	}
	configs := map[string]string{"share.auto.offset.reset": "earliest"}
	if lockMs > 0 {
		configs["share.record.lock.duration.ms"] = fmt.Sprint(lockMs)
	}
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	resource := kmsg.NewIncrementalAlterConfigsRequestResource()
	resource.ResourceType, resource.ResourceName = kmsg.ConfigResourceTypeGroupConfig, name
	for k, v := range configs {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		resource.Configs = append(resource.Configs, c)
	}
	alter.Resources = append(alter.Resources, resource)
	altered, err := alter.RequestWith(ctx, cl)
	must(err, "alter group configs")
	if code := altered.Resources[0].ErrorCode; code != 0 {
		fail("alter group %s: error %d", name, code)
	}
	producer := client(bootstrap, kgo.DefaultProduceTopic(name), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer producer.Close()
	for i := 0; i < shareRecords; i++ {
		r := &kgo.Record{Value: []byte(fmt.Sprintf("v%d", i)), Partition: int32(i) % parts}
		producer.Produce(ctx, r, func(_ *kgo.Record, err error) { must(err, "produce "+name) })
	}
	must(producer.Flush(ctx), "flush "+name)
}

func shareClient(bootstrap, group string, opts ...kgo.Opt) *kgo.Client {
	return client(bootstrap, append([]kgo.Opt{kgo.ConsumeTopics(group), kgo.ShareGroup(group)}, opts...)...)
}

func shortPoll(ctx context.Context, cl *kgo.Client) kgo.Fetches {
	poll, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	fetches := cl.PollFetches(poll)
	fetches.EachError(func(t string, p int32, err error) {
		if err != context.DeadlineExceeded && err != context.Canceled {
			fail("share fetch %s/%d: %v", t, p, err)
		}
	})
	return fetches
}

func shareSharing(ctx context.Context, bootstrap, name string) {
	prepareShare(ctx, bootstrap, name, 3, 0)
	var mu sync.Mutex
	seen := map[string]int32{}
	var doubled []string
	perClient := map[int]int{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			cl := shareClient(bootstrap, name)
			defer cl.Close()
			for {
				select {
				case <-done:
					return
				default:
				}
				shortPoll(ctx, cl).EachRecord(func(r *kgo.Record) {
					mu.Lock()
					defer mu.Unlock()
					perClient[id]++
					v, count := string(r.Value), r.DeliveryCount()
					if before, ok := seen[v]; ok && count <= before {
						doubled = append(doubled, fmt.Sprintf("%s delivered with count %d after %d", v, count, before))
					}
					seen[v] = count
				})
			}
		}(i)
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == shareRecords {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	if len(seen) != shareRecords {
		fail("share implicit: %d of %d records delivered", len(seen), shareRecords)
	}
	if len(doubled) > 0 {
		fail("share implicit: records held by two clients at once: %v", doubled)
	}
	fmt.Printf("franz-go share: %d records over clients %v\n", shareRecords, perClient)
}

func shareExplicit(ctx context.Context, bootstrap, name string) {
	prepareShare(ctx, bootstrap, name, 3, 0)
	var failed []string
	var mu sync.Mutex
	callback := kgo.ShareAckCallback(func(_ *kgo.Client, results kgo.ShareAckResults) {
		if err := results.Error(); err != nil {
			mu.Lock()
			failed = append(failed, err.Error())
			mu.Unlock()
		}
	})
	cl := shareClient(bootstrap, name, kgo.ShareMaxRecords(20), kgo.ShareMaxRecordsStrict(), callback)
	defer cl.Close()
	accepted, rejected, released := map[string]bool{}, map[string]bool{}, map[string]int32{}
	deadline := time.Now().Add(90 * time.Second)
	for len(accepted)+len(rejected) < shareRecords {
		if time.Now().After(deadline) {
			fail("share explicit: %d accepted, %d rejected in 90 s", len(accepted), len(rejected))
		}
		fetches := shortPoll(ctx, cl)
		if n := fetches.NumRecords(); n > 20 {
			fail("share explicit: a poll with a strict limit of 20 returned %d records", n)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if accepted[v] || rejected[v] {
				fail("share explicit: %s came back after it was accepted or rejected", v)
			}
			var n int
			fmt.Sscanf(v, "v%d", &n)
			switch {
			case n%10 == 0:
				r.Ack(kgo.AckReject)
				rejected[v] = true
			case n%10 == 1 && released[v] == 0:
				r.Ack(kgo.AckRelease)
				released[v] = r.DeliveryCount()
			default:
				if before, ok := released[v]; ok && r.DeliveryCount() <= before {
					fail("share explicit: released %s came back with count %d", v, r.DeliveryCount())
				}
				r.Ack(kgo.AckAccept)
				accepted[v] = true
			}
		})
		must(cl.FlushAcks(ctx), "flush acks")
	}
	if len(rejected) != shareRecords/10 || len(released) != shareRecords/10 {
		fail("share explicit: %d rejected and %d released, want %d each", len(rejected), len(released), shareRecords/10)
	}
	if len(failed) > 0 {
		fail("share explicit: acknowledgements failed: %s", strings.Join(failed, "; "))
	}
	fmt.Printf("franz-go share explicit: %d accepted (%d after a release), %d rejected\n",
		len(accepted), len(released), len(rejected))
}

func shareRenew(ctx context.Context, bootstrap, name string) {
	prepareShare(ctx, bootstrap, name, 1, 3000)
	var renewErrs []string
	var mu sync.Mutex
	callback := kgo.ShareAckCallback(func(_ *kgo.Client, results kgo.ShareAckResults) {
		if err := results.Error(); err != nil {
			mu.Lock()
			renewErrs = append(renewErrs, err.Error())
			mu.Unlock()
		}
	})
	holder := shareClient(bootstrap, name, kgo.ShareMaxRecords(10), kgo.ShareMaxRecordsStrict(), callback)
	var held []*kgo.Record
	for deadline := time.Now().Add(30 * time.Second); len(held) == 0; {
		if time.Now().After(deadline) {
			fail("share renew: the holder got no records")
		}
		held = shortPoll(ctx, holder).Records()
	}
	kept := held[0]
	others := map[string]bool{}
	for _, r := range held[1:] {
		others[string(r.Value)] = true
	}
	// The other member polls throughout; the holder renews one record and leaves the rest.
	other := shareClient(bootstrap, name)
	defer other.Close()
	start := time.Now()
	got := map[string]int32{}
	for time.Since(start) < 9*time.Second {
		kept.Ack(kgo.AckRenew)
		must(holder.FlushAcks(ctx), "flush renew")
		until := time.Now().Add(time.Second)
		for time.Now().Before(until) {
			shortPoll(ctx, other).EachRecord(func(r *kgo.Record) { got[string(r.Value)] = r.DeliveryCount() })
		}
	}
	if _, ok := got[string(kept.Value)]; ok {
		fail("share renew: %s was renewed by its holder but delivered to the other member", kept.Value)
	}
	kept.Ack(kgo.AckAccept)
	must(holder.FlushAcks(ctx), "flush accept")
	// The holder fetches in the background when it flushes, so some records whose locks ran
	// out may have gone back to it, delivered again.
	for until := time.Now().Add(2 * time.Second); time.Now().Before(until); {
		shortPoll(ctx, holder).EachRecord(func(r *kgo.Record) {
			if r.DeliveryCount() > got[string(r.Value)] {
				got[string(r.Value)] = r.DeliveryCount()
			}
		})
	}
	if count := got[string(kept.Value)]; count != 0 {
		fail("share renew: %s, renewed then accepted, was delivered again (count %d)", kept.Value, count)
	}
	mu.Lock()
	if len(renewErrs) > 0 {
		fail("share renew: renewals failed: %s", strings.Join(renewErrs, "; "))
	}
	mu.Unlock()
	for v := range others {
		if count, ok := got[v]; !ok || count < 2 {
			fail("share renew: %s, not renewed, was not delivered again after its lock ran out (count %d)", v, count)
		}
	}
	// Closing finalizes the records it did not renew, which it no longer holds: the broker
	// refuses those acknowledgements, as it should.
	holder.Close()
	fmt.Printf("franz-go share AckRenew: %s held 9 s under a 3 s lock; the %d it did not renew were delivered again\n",
		kept.Value, len(others))
}
