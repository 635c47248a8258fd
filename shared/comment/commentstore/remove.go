package commentstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
)

// Actor is the caller of a removal.
type Actor struct {
	UserID    string
	Moderator bool
	// Reason is a moderator's words for removing another's comment
	// (optional), recorded in the audit trail.
	Reason string
}

// RemoveResult says what a removal did.
type RemoveResult struct {
	// Updated counts the comments whose status changed.
	Updated int
	// Events are the counter events to publish: the batch's decrements,
	// one delta per counter.
	Events []events.Event
	// CommitTime is the removal's commit timestamp.
	CommitTime time.Time
}

// Delete removes one comment for its author or a moderator. Unknown is
// ErrNotFound, someone else's ErrPermissionDenied; a comment already deleted
// or spam changes nothing (and no count). A moderator's delete of another's
// comment is a moderation action, as a spam mark is: in the transaction
// of the removal, the moderator passes the store's gate (revoked:
// moderation.ErrRevoked; over the rate: *errs.RateLimitedError) and the
// delete gets its audit entry with actor.Reason.
func (s *Store) Delete(ctx context.Context, actor Actor, id string) (RemoveResult, error) {
	var mark *moderatorMark
	if actor.Moderator {
		mark = &moderatorMark{action: moderation.ActionDelete, reason: actor.Reason, othersOnly: true}
	}
	res, err := s.remove(ctx, actor, []string{id}, comment.Deleted, false, mark, func(found map[string]comment.Comment) error {
		c, ok := found[id]
		if !ok {
			return ErrNotFound
		}
		if c.AuthorID != actor.UserID && !actor.Moderator {
			return ErrPermissionDenied
		}
		return nil
	})
	if err != nil {
		return RemoveResult{}, fmt.Errorf("commentstore.Delete(%q): %w", id, err)
	}
	return res, nil
}

// MarkSpam records the spam verdict on up to comment.MaxRemoveBatch comments
// (the caller checks the actor's token is a moderator's) and, in the same
// transaction, passes the moderator through the store's gate (revoked:
// moderation.ErrRevoked; over the rate: *errs.RateLimitedError) and
// writes one audit entry per comment found, with the moderator's reason
// (optional). Unknown ids and repeats are ignored; comments already deleted
// become spam without a count change.
func (s *Store) MarkSpam(ctx context.Context, actor Actor, ids []string, reason string) (RemoveResult, error) {
	if len(ids) > comment.MaxRemoveBatch {
		return RemoveResult{}, fmt.Errorf("commentstore.MarkSpam: %d ids, at most %d", len(ids), comment.MaxRemoveBatch)
	}
	res, err := s.remove(ctx, actor, ids, comment.Spam, false, &moderatorMark{action: moderation.ActionSpam, reason: reason}, nil)
	if err != nil {
		return RemoveResult{}, fmt.Errorf("commentstore.MarkSpam: %w", err)
	}
	return res, nil
}

// moderatorMark is a removal that is a moderator's action (a spam mark, a
// delete of another's comment): what the audit trail records, and why in
// the moderator's words. With othersOnly only the comments of others are
// moderation (a moderator deleting their own comment is its author).
type moderatorMark struct {
	action     moderation.Action
	reason     string
	othersOnly bool
}

// acts reports whether the removal of c is the moderator's action.
func (m *moderatorMark) acts(actor Actor, c comment.Comment) bool {
	return m != nil && (!m.othersOnly || c.AuthorID != actor.UserID)
}

// remove runs one removal in one read-write transaction: the status of every
// named comment, of the parents of the replies among them, and the visible
// replies of the visible top-level ones are read, and the status changes and
// the outbox rows of the decrements are written, all at one timestamp. A
// concurrent removal of the same comment (a delete racing a spam sweep)
// commits before or after this one, never in between, so exactly one of them
// sees the comment visible and decrements. With eraseRows the named
// comments' rows are deleted too, in the same transaction (the account
// erasure): a comment leaves the counts and the table at once. With mark
// (a moderator's action) the moderator passes the gate, once, and each
// comment found that the action is the moderator's gets its audit entry.
func (s *Store) remove(ctx context.Context, actor Actor, ids []string, to comment.Status, eraseRows bool, mark *moderatorMark, check func(map[string]comment.Comment) error) (RemoveResult, error) {
	var res RemoveResult
	commitTS, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		res = RemoveResult{}
		now := s.now()
		var ms []*spanner.Mutation
		var keys []spanner.Key
		seen := map[string]bool{}
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				keys = append(keys, spanner.Key{id})
			}
		}
		found, err := readComments(ctx, tx, keys)
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(found); err != nil {
				return err
			}
		}
		if mark != nil && (!mark.othersOnly || slices.ContainsFunc(keys, func(k spanner.Key) bool {
			c, ok := found[k[0].(string)]
			return ok && mark.acts(actor, c)
		})) {
			if ms, err = s.gate.Admit(ctx, tx, actor.UserID, now.UTC()); err != nil {
				return err
			}
		}
		r := comment.Removal{To: to, ParentStatus: map[string]comment.Status{}, VisibleReplies: map[string]int64{}}
		var parentKeys []spanner.Key
		var tops []string
		for _, k := range keys {
			c, ok := found[k[0].(string)]
			if !ok {
				continue
			}
			r.Targets = append(r.Targets, c)
			switch {
			case c.IsReply():
				parentKeys = append(parentKeys, spanner.Key{c.ParentID})
			case c.Status == comment.Visible:
				tops = append(tops, c.ID)
			}
		}
		parents, err := readComments(ctx, tx, parentKeys)
		if err != nil {
			return err
		}
		for id, p := range parents {
			r.ParentStatus[id] = p.Status
		}
		if len(tops) > 0 {
			// One range read of the replies index per comment: the visible
			// replies it would take out of the counts.
			var prefixes []spanner.KeySet
			for _, id := range tops {
				prefixes = append(prefixes, spanner.Key{id}.AsPrefix())
			}
			err := tx.ReadUsingIndex(ctx, tableComments, indexReplies, spanner.KeySets(prefixes...),
				[]string{"ListedParentId"}).Do(func(row *spanner.Row) error {
				var id string
				if err := row.Columns(&id); err != nil {
					return err
				}
				r.VisibleReplies[id]++
				return nil
			})
			if err != nil {
				return fmt.Errorf("count visible replies: %w", err)
			}
		}
		plan, err := comment.PlanRemoval(r)
		if err != nil {
			return err
		}
		changed := map[string]bool{}
		for _, c := range plan.Changed {
			changed[c.ID] = true
			// Only the listing column of its kind: the other is NULL already.
			lv, lp := c.Listed()
			col, val := "ListedVideoId", lv
			if c.IsReply() {
				col, val = "ListedParentId", lp
			}
			ms = append(ms, spanner.Update(tableComments, []string{"CommentId", "Status", "UpdateTime", col},
				[]any{c.ID, string(c.Status), spanner.CommitTimestamp, nullString(val)}))
		}
		res.Updated = len(plan.Changed)
		res.Events = plan.Events(now)
		for _, ev := range res.Events {
			// Authored by the actor: the author deleting their own comment
			// sees the removal in their next counts read.
			ms = append(ms, outboxstore.Pending(ev, actor.UserID)...)
		}
		tally, err := tallyMutations(ctx, tx, res.Events)
		if err != nil {
			return err
		}
		ms = append(ms, tally...)
		for _, c := range r.Targets {
			if mark.acts(actor, c) {
				ms = append(ms, moderationstore.Record(moderation.Entry{
					Action: mark.action, Actor: actor.UserID, ActorKind: moderation.ActorModerator,
					UserID: c.AuthorID, CommentID: c.ID, VideoID: c.VideoID, Reason: mark.reason, Changed: changed[c.ID],
				})...)
			}
		}
		if eraseRows {
			for _, c := range r.Targets {
				ms = append(ms, spanner.Delete(tableComments, spanner.Key{c.ID}))
			}
		}
		if len(ms) == 0 {
			return nil
		}
		return tx.BufferWrite(ms)
	})
	res.CommitTime = commitTS
	return res, err
}
