package commentstore

import (
	"context"

	"github.com/videngage/engagement/shared/batch"
	"github.com/videngage/engagement/shared/events"
)

// Writer records comment changes and publishes their counter events. Posts
// are group-committed when batched (the default): the posts that arrive
// while a transaction runs are recorded together in the next one and their
// events published as one message, so a hot video's comments cost one commit
// and one message per batch. Unbatched (the naive baseline) each post is its
// own transaction and message.
//
// The change is recorded first, with its deltas in the outbox; the event is
// published after the commit by events.PublishCommitted: when publishing
// fails the change stands and is answered as done, and the rollup's relay
// republishes its pending deltas. The counter may lag the truth, never lead
// it.
type Writer struct {
	store *Store
	pub   events.Publisher
	posts *batch.GroupCommit[CreateRequest, CreateResult]
}

// WriterOptions tune a Writer: Batched turns group commit of posts on.
type WriterOptions = batch.GroupCommitOptions

// NewWriter returns a Writer over store publishing through pub.
func NewWriter(store *Store, pub events.Publisher, o WriterOptions) *Writer {
	w := &Writer{store: store, pub: pub}
	w.posts = batch.NewGroupCommit(o, w.post)
	return w
}

// Post records one comment and publishes its event.
func (w *Writer) Post(ctx context.Context, r CreateRequest) (CreateResult, error) {
	return w.posts.Do(ctx, r)
}

func (w *Writer) post(ctx context.Context, reqs []CreateRequest) ([]CreateResult, error) {
	res, err := w.store.CreateMany(ctx, reqs)
	if err != nil {
		return nil, err
	}
	var evs []events.Event
	for _, r := range res {
		if r.Event != nil {
			evs = append(evs, *r.Event)
		}
	}
	events.PublishCommitted(ctx, w.pub, evs)
	return res, nil
}

// Delete removes one comment (author or moderator) and publishes its
// decrements.
func (w *Writer) Delete(ctx context.Context, actor Actor, id string) (RemoveResult, error) {
	res, err := w.store.Delete(ctx, actor, id)
	if err != nil {
		return RemoveResult{}, err
	}
	events.PublishCommitted(ctx, w.pub, res.Events)
	return res, nil
}

// MarkSpam records a moderator's spam verdict on a batch of comments and
// publishes the batch's decrements.
func (w *Writer) MarkSpam(ctx context.Context, actor Actor, ids []string, reason string) (RemoveResult, error) {
	res, err := w.store.MarkSpam(ctx, actor, ids, reason)
	if err != nil {
		return RemoveResult{}, err
	}
	events.PublishCommitted(ctx, w.pub, res.Events)
	return res, nil
}
