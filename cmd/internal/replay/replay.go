// Package replay re-drives dead-lettered events after the fault that
// dead-lettered them is fixed: it pulls them from a topic's dead-letter
// subscription, republishes each to the topic it came from, and
// acknowledges it on the dead-letter subscription only once Pub/Sub has
// the copy. A failure anywhere leaves the message where it was, so a run
// can be repeated until nothing is left.
//
// The consumers make this exactly once in effect (docs/operations.md,
// "Replaying dead-lettered events"): a republished history batch carries
// its batch id, so ApplyHistory writes the same cells and ApplyViews owns
// the same view claims and stages the same event ids, which the counters'
// AppliedEvents refuse a second time; a counter event carries its event id
// (AppliedEvents), or its outbox rows, deleted when it was applied. So a
// copy reaching a consumer that had applied it already, or two copies of
// one message dead-lettered by both of its topic's subscriptions, change
// nothing. AppliedEvents keeps an id for 7 days: an event older than
// MaxAge is left on the dead-letter subscription and reported instead.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/topology"
)

// DefaultMaxAge is the age past which an event is not republished: a day
// under the 7 days that AppliedEvents remembers an applied event's id, so
// that every copy a replay sends is still recognised by the consumer that
// applied it.
const DefaultMaxAge = 6 * 24 * time.Hour

// Options of one run.
type Options struct {
	// Topic is the source topic (topology.json) whose dead letters are
	// replayed.
	Topic string
	// Limit bounds the messages one run takes (default 1000); Batch, the
	// messages pulled and republished at once (default 100).
	Limit, Batch int
	// DryRun reports what a run would do and leaves every message.
	DryRun bool
	// MaxAge: events accepted longer ago are left (default DefaultMaxAge).
	MaxAge time.Duration
	// AckPoison acknowledges messages that no consumer can ever apply (they
	// are reported either way); the subscription retains acknowledged
	// messages, so they can still be found by seeking it.
	AckPoison bool
	// Out receives one line per message and the summary.
	Out io.Writer
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Report is what a run did.
type Report struct {
	Pulled      int `json:"pulled"`
	Republished int `json:"republished"`
	// WouldRepublish counts what a dry run would have republished.
	WouldRepublish int `json:"wouldRepublish"`
	TooOld         int `json:"tooOld"`
	Poison         int `json:"poison"`
	// Failed are messages whose republish or acknowledgement failed: they
	// stay on (or return to) the dead-letter subscription.
	Failed int `json:"failed"`
}

func (r Report) String() string {
	return fmt.Sprintf("%d pulled, %d republished, %d would be republished, %d left as too old, %d poison, %d failed",
		r.Pulled, r.Republished, r.WouldRepublish, r.TooOld, r.Poison, r.Failed)
}

// Replayable are the topics whose events this package judges; the erasure
// steps are re-driven by ResumeErasures from their Spanner records instead.
var Replayable = []string{"history-events", "counter-events"}

// Verdict is the judgement of one dead-lettered message.
type Verdict struct {
	// What describes the message's content for the operator.
	What string
	// Accepted is when its oldest event whose repeat AppliedEvents must
	// recognise was accepted (zero: none, age does not matter).
	Accepted time.Time
	// Poison: no consumer can ever apply the message.
	Poison error
}

// Judge decodes a message of topic as its consumers do.
func Judge(topic string, data []byte) Verdict {
	switch topic {
	case "history-events":
		b, err := history.DecodeBatch(data)
		if err != nil {
			return Verdict{What: "undecodable history message", Poison: err}
		}
		var first time.Time
		users := map[string]bool{}
		for _, w := range b.Watches {
			users[w.UserID] = true
			if at := w.AcceptedAt(); first.IsZero() || at.Before(first) {
				first = at
			}
		}
		return Verdict{What: fmt.Sprintf("history batch %s: %d watches of %d users", b.ID, len(b.Watches), len(users)), Accepted: first}
	case "counter-events":
		m, err := events.Decode(data)
		if err != nil {
			return Verdict{What: "undecodable counter message", Poison: err}
		}
		var first time.Time
		ids := make([]string, 0, len(m.Events))
		for _, e := range m.Events {
			ids = append(ids, e.ID)
			// An outbox event counts while its outbox rows exist, whatever
			// its age: only the others rely on AppliedEvents.
			if !e.Outbox && (first.IsZero() || e.Time.Before(first)) {
				first = e.Time
			}
		}
		if len(ids) > 3 {
			ids = append(ids[:3], "…")
		}
		return Verdict{What: fmt.Sprintf("%d counter events (%s)", len(m.Events), strings.Join(ids, ", ")), Accepted: first}
	}
	return Verdict{What: "message of an unknown topic", Poison: fmt.Errorf("topic %q is not replayable", topic)}
}

// deadLetterAttr starts the attributes Pub/Sub adds when it dead-letters a
// message; they are dropped from the copy.
const deadLetterAttr = "CloudPubSubDeadLetter"

// ReplayAttr is the attribute a republished copy carries: the id of the
// dead-lettered message it copies, for the consumers' logs.
const ReplayAttr = "replayOf"

// Run replays the dead letters of o.Topic through client c.
func Run(ctx context.Context, c *pubsub.Client, top topology.PubSub, o Options) (Report, error) {
	var rep Report
	var topic *topology.Topic
	for i := range top.Topics {
		if top.Topics[i].Name == o.Topic {
			topic = &top.Topics[i]
		}
	}
	switch {
	case topic == nil:
		return rep, fmt.Errorf("replay: no topic %q in topology.json", o.Topic)
	case !slices.Contains(Replayable, o.Topic):
		return rep, fmt.Errorf("replay: %s is not replayable here (replayable: %s)", o.Topic, strings.Join(Replayable, ", "))
	}
	if o.Limit <= 0 {
		o.Limit = 1000
	}
	if o.Batch <= 0 {
		o.Batch = 100
	}
	o.Batch = min(o.Batch, o.Limit)
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	subName := top.DeadLetterSubscription(topic.DeadLetterTopic)
	sub := "projects/" + c.Project() + "/subscriptions/" + subName
	admin := c.SubscriptionAdminClient
	pub := bus.NewPublisher(c, o.Topic)
	defer pub.Stop()

	// Messages left stay held (unacknowledged) until the run ends, so that
	// the run does not pull them again; then they are released at once.
	var held []string
	seen := map[string]bool{}
	defer func() {
		if len(held) == 0 {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for chunk := range slices.Chunk(held, 1000) {
			if err := admin.ModifyAckDeadline(rctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: sub, AckIds: chunk}); err != nil {
				fmt.Fprintf(o.Out, "release: %v (the messages return after their ack deadline)\n", err)
			}
		}
	}()

	for rep.Pulled < o.Limit {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := admin.Pull(pctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: int32(min(o.Batch, o.Limit-rep.Pulled))})
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
				break // nothing to pull
			}
			return rep, fmt.Errorf("replay: pull %s: %w", subName, err)
		}
		fresh := 0
		var publish []*pubsubpb.ReceivedMessage
		var ack []string
		for _, m := range resp.ReceivedMessages {
			if seen[m.Message.MessageId] {
				held = append(held, m.AckId)
				continue
			}
			seen[m.Message.MessageId] = true
			fresh++
			rep.Pulled++
			v := Judge(o.Topic, m.Message.Data)
			from := origin(subName, m)
			switch age := o.Now().Sub(v.Accepted); {
			case v.Poison != nil:
				rep.Poison++
				if o.AckPoison && !o.DryRun {
					ack = append(ack, m.AckId)
					fmt.Fprintf(o.Out, "acked poison %s: %s: %v\n", from, v.What, v.Poison)
				} else {
					held = append(held, m.AckId)
					fmt.Fprintf(o.Out, "left poison %s: %s: %v\n", from, v.What, v.Poison)
				}
			case !v.Accepted.IsZero() && age > o.MaxAge:
				rep.TooOld++
				held = append(held, m.AckId)
				fmt.Fprintf(o.Out, "left too old %s: %s, accepted %v ago (over %v: a consumer may no longer recognise a repeat)\n",
					from, v.What, age.Round(time.Minute), o.MaxAge)
			case o.DryRun:
				rep.WouldRepublish++
				held = append(held, m.AckId)
				fmt.Fprintf(o.Out, "would republish %s: %s\n", from, v.What)
			default:
				publish = append(publish, m)
			}
		}
		if fresh == 0 {
			break // only what this run already took: nothing new left
		}
		acked, failed := republish(ctx, pub, o, subName, publish, &rep)
		ack = append(ack, acked...)
		held = append(held, failed...)
		if len(ack) > 0 {
			if err := admin.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: ack}); err != nil {
				// Republished and not acknowledged: the next run republishes
				// them again, which the consumers refuse as repeats.
				rep.Failed += len(acked)
				rep.Republished -= len(acked)
				fmt.Fprintf(o.Out, "acknowledge %d messages on %s: %v (republished; a repeat run sends them again, harmlessly)\n", len(ack), subName, err)
			}
		}
	}
	fmt.Fprintf(o.Out, "%s: %s\n", o.Topic, rep)
	return rep, nil
}

// republish publishes ms to o.Topic, a few at once, each waiting for
// Pub/Sub's ack, and returns the ack ids of those published and of those
// not.
func republish(ctx context.Context, pub *bus.Publisher, o Options, subName string, ms []*pubsubpb.ReceivedMessage, rep *Report) (acked, failed []string) {
	ok := make([]bool, len(ms))
	errs := make([]error, len(ms))
	var g errgroup.Group
	g.SetLimit(16)
	for i, m := range ms {
		g.Go(func() error {
			attrs := map[string]string{}
			for k, v := range m.Message.Attributes {
				if !strings.HasPrefix(k, deadLetterAttr) {
					attrs[k] = v
				}
			}
			attrs[ReplayAttr] = m.Message.MessageId
			_, errs[i] = pub.Publish(ctx, m.Message.Data, attrs)
			ok[i] = errs[i] == nil
			return nil
		})
	}
	g.Wait()
	for i, m := range ms {
		from := origin(subName, m)
		v := Judge(o.Topic, m.Message.Data)
		if ok[i] {
			rep.Republished++
			acked = append(acked, m.AckId)
			fmt.Fprintf(o.Out, "republished %s to %s: %s\n", from, o.Topic, v.What)
		} else {
			rep.Failed++
			failed = append(failed, m.AckId)
			fmt.Fprintf(o.Out, "failed %s: %s: %v (left on %s)\n", from, v.What, errs[i], subName)
		}
	}
	return acked, failed
}

// origin names a dead-lettered message: where it is and where it came from.
func origin(subName string, m *pubsubpb.ReceivedMessage) string {
	return fmt.Sprintf("%s %s (from %s after %s deliveries)", subName, m.Message.MessageId,
		m.Message.Attributes[deadLetterAttr+"SourceSubscription"], m.Message.Attributes[deadLetterAttr+"SourceDeliveryCount"])
}
