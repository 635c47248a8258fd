// Package accountstore keeps the account erasure records in Spanner
// (AccountErasures, 051_account_erasure.sql): asking for an erasure, moving
// it from phase to phase, finding those that stalled, and the check the
// write transactions of the other stores make to refuse an erasing user.
package accountstore

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/spannerdb"
)

const tableErasures = "AccountErasures"

var columns = []string{"UserId", "RequestTime", "Phase", "UpdateTime", "DoneTime", "Reactions", "Comments", "HistoryRows", "Steps"}

// Store is the erasure records' store.
type Store struct{ db *spannerdb.DB }

// New returns the store.
func New(db *spannerdb.DB) *Store { return &Store{db: db} }

func scan(r *spanner.Row) (account.Erasure, error) {
	var e account.Erasure
	var phase string
	var done spanner.NullTime
	if err := r.Columns(&e.UserID, &e.RequestTime, &phase, &e.UpdateTime, &done, &e.Reactions, &e.Comments, &e.HistoryRows, &e.Steps); err != nil {
		return account.Erasure{}, err
	}
	e.Phase = account.Phase(phase)
	if done.Valid {
		e.DoneTime = done.Time
	}
	if !e.Phase.Valid() {
		return account.Erasure{}, fmt.Errorf("accountstore: erasure of a user at unknown phase %q", phase)
	}
	return e, nil
}

func read(ctx context.Context, tx interface {
	ReadRow(context.Context, string, spanner.Key, []string) (*spanner.Row, error)
}, userID string) (account.Erasure, bool, error) {
	row, err := tx.ReadRow(ctx, tableErasures, spanner.Key{userID}, columns)
	if spanner.ErrCode(err) == codes.NotFound {
		return account.Erasure{}, false, nil
	}
	if err != nil {
		return account.Erasure{}, false, err
	}
	e, err := scan(row)
	return e, err == nil, err
}

// Request opens the user's erasure, or leaves an open one as it is, and
// returns it. A finished erasure is started again: what the user wrote since
// is erased in turn.
func (s *Store) Request(ctx context.Context, userID string) (account.Erasure, error) {
	var e account.Erasure
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		cur, ok, err := read(ctx, tx, userID)
		if err != nil {
			return err
		}
		if ok && cur.Open() {
			e = cur
			return nil
		}
		e = account.Erasure{UserID: userID, Phase: account.Reactions}
		return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate(tableErasures, columns,
			[]any{userID, spanner.CommitTimestamp, string(account.Reactions), spanner.CommitTimestamp, spanner.NullTime{}, 0, 0, 0, 0})})
	})
	if err != nil {
		return account.Erasure{}, fmt.Errorf("accountstore.Request: %w", spannerdb.Map(err))
	}
	return e, nil
}

// Get returns the user's erasure record; ok is false when there is none.
func (s *Store) Get(ctx context.Context, userID string) (e account.Erasure, ok bool, err error) {
	e, ok, err = read(ctx, s.db.Single(), userID)
	if err != nil {
		return account.Erasure{}, false, fmt.Errorf("accountstore.Get: %w", spannerdb.Map(err))
	}
	return e, ok, nil
}

// Step records a step of phase: its figures are added and the record
// touched, so the sweep sees it moving. When advance is true the phase
// moves on (to Done, with DoneTime, after the last). Nothing changes unless
// the record is still open at phase: a step of a duplicate worker that
// another already moved past is not counted twice, nor is a phase skipped.
func (s *Store) Step(ctx context.Context, userID string, phase account.Phase, add account.Figures, advance bool) (account.Erasure, error) {
	var e account.Erasure
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		cur, ok, err := read(ctx, tx, userID)
		if err != nil {
			return err
		}
		e = cur
		if !ok || !cur.Open() || cur.Phase != phase {
			return nil
		}
		e.Reactions += add.Reactions
		e.Comments += add.Comments
		e.HistoryRows += add.HistoryRows
		e.Steps += add.Steps
		var done any = spanner.NullTime{}
		if advance {
			e.Phase = phase.Next()
			if e.Phase == account.Done {
				done = spanner.CommitTimestamp
				e.DoneTime = time.Now()
			}
		}
		return tx.BufferWrite([]*spanner.Mutation{spanner.Update(tableErasures,
			[]string{"UserId", "Phase", "UpdateTime", "DoneTime", "Reactions", "Comments", "HistoryRows", "Steps"},
			[]any{userID, string(e.Phase), spanner.CommitTimestamp, done, e.Reactions, e.Comments, e.HistoryRows, e.Steps})})
	})
	if err != nil {
		return account.Erasure{}, fmt.Errorf("accountstore.Step: %w", spannerdb.Map(err))
	}
	return e, nil
}

// Stalled lists up to limit open erasures not moved since before: those
// whose worker died, whose message was lost, or that wait at Settle.
func (s *Store) Stalled(ctx context.Context, before time.Time, limit int) ([]account.Erasure, error) {
	stmt := spanner.Statement{
		SQL: `SELECT UserId, RequestTime, Phase, UpdateTime, DoneTime, Reactions, Comments, HistoryRows, Steps
FROM AccountErasures@{FORCE_INDEX=AccountErasuresOpen}
WHERE DoneTime IS NULL AND UpdateTime < @before ORDER BY UpdateTime LIMIT @limit`,
		Params: map[string]any{"before": before, "limit": int64(limit)},
	}
	var out []account.Erasure
	err := s.db.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error {
		e, err := scan(r)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("accountstore.Stalled: %w", spannerdb.Map(err))
	}
	return out, nil
}

// Erasing reads, inside a write transaction of another store, which of the
// users have an open erasure: their writes are refused in that transaction,
// so a write commits either before the erasure was asked for (and the
// erasure, which starts after, finds it) or not at all.
func Erasing(ctx context.Context, tx *spanner.ReadWriteTransaction, userKeys []spanner.Key) (map[string]bool, error) {
	out := map[string]bool{}
	if len(userKeys) == 0 {
		return out, nil
	}
	err := tx.Read(ctx, tableErasures, spanner.KeySetFromKeys(userKeys...), []string{"UserId", "DoneTime"}).Do(func(r *spanner.Row) error {
		var u string
		var done spanner.NullTime
		if err := r.Columns(&u, &done); err != nil {
			return err
		}
		if !done.Valid {
			out[u] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read account erasures: %w", err)
	}
	return out, nil
}
