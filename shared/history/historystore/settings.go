package historystore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
)

// SettingsCollection is the history settings collection (topology.json).
const SettingsCollection = "historySettings"

// DocID is the document id of a user: ids may hold any character, document
// ids may not ('/', "__x__"), so the id is the base64url of the user id
// behind a letter.
func DocID(userID string) string {
	return "u" + base64.RawURLEncoding.EncodeToString([]byte(userID))
}

// Settings stores users' history settings.
type Settings struct{ c *firestore.Client }

// NewSettings uses client c.
func NewSettings(c *firestore.Client) *Settings { return &Settings{c: c} }

type settingsDoc struct {
	history.Settings
	UpdateTime time.Time `firestore:"updateTime"`
}

// Get returns the user's settings; a user who never set any has the defaults.
func (s *Settings) Get(ctx context.Context, userID string) (history.Settings, error) {
	snap, err := s.c.Collection(SettingsCollection).Doc(DocID(userID)).Get(ctx)
	if status.Code(err) == codes.NotFound {
		return history.Settings{}, nil
	}
	if err != nil {
		return history.Settings{}, errs.Backend("read history settings", err)
	}
	var d settingsDoc
	if err := snap.DataTo(&d); err != nil {
		return history.Settings{}, fmt.Errorf("historystore.Settings.Get: %w", err)
	}
	return d.Settings, nil
}

// Put replaces the user's settings, unless the account is being erased
// (errs.ErrAccountErasing): read and written in one transaction, so that a
// change racing the erasure's start neither lands after it nor drops its
// mark.
func (s *Settings) Put(ctx context.Context, userID string, v history.Settings) error {
	v.Erasing = false
	ref := s.c.Collection(SettingsCollection).Doc(DocID(userID))
	err := s.c.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(ref)
		switch {
		case status.Code(err) == codes.NotFound:
		case err != nil:
			return err
		default:
			var d settingsDoc
			if err := snap.DataTo(&d); err != nil {
				return err
			}
			if d.Erasing {
				return errs.ErrAccountErasing
			}
		}
		return tx.Set(ref, settingsDoc{Settings: v, UpdateTime: time.Now().UTC()})
	})
	if errors.Is(err, errs.ErrAccountErasing) {
		return err
	}
	if err != nil {
		return errs.Backend("write history settings", err)
	}
	return nil
}

// UserSettings are one user's settings, as AutoDeleting lists them.
type UserSettings struct {
	UserID   string
	Settings history.Settings
}

// AutoDeleting lists up to limit users whose auto-delete is on, in document
// order after the cursor ("": from the first), and returns the cursor after
// the last one listed, or "" when the list is done (fewer than limit
// documents were after the cursor). It is one Firestore query that reads a
// document per user listed.
func (s *Settings) AutoDeleting(ctx context.Context, after string, limit int) ([]UserSettings, string, error) {
	q := s.c.Collection(SettingsCollection).
		Where("autoDeleteMonths", "in", history.AutoDeleteChoices()).
		OrderBy(firestore.DocumentID, firestore.Asc).
		Limit(limit)
	if after != "" {
		q = q.StartAfter(after)
	}
	docs, err := q.Documents(ctx).GetAll()
	if err != nil {
		return nil, after, errs.Backend("list auto-deleting users", err)
	}
	out := make([]UserSettings, 0, len(docs))
	next := ""
	for _, snap := range docs {
		next = snap.Ref.ID
		userID, ok := userOfDocID(snap.Ref.ID)
		if !ok {
			continue // not a user's document
		}
		var d settingsDoc
		if err := snap.DataTo(&d); err != nil {
			return nil, after, fmt.Errorf("historystore.Settings.AutoDeleting: %s: %w", snap.Ref.ID, err)
		}
		out = append(out, UserSettings{UserID: userID, Settings: d.Settings})
	}
	if len(docs) < limit {
		next = ""
	}
	return out, next, nil
}

// userOfDocID is the user id of a DocID.
func userOfDocID(id string) (string, bool) {
	if !strings.HasPrefix(id, "u") {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(id[1:])
	if err != nil {
		return "", false
	}
	return string(b), true
}

// JobsCollection holds the cursors of history's scheduled jobs (topology.json).
const JobsCollection = "historyJobs"

type cursorDoc struct {
	Cursor     string    `firestore:"cursor"`
	UpdateTime time.Time `firestore:"updateTime"`
}

// Cursor is where the job called name stopped ("" when it never ran or
// finished its last pass).
func (s *Settings) Cursor(ctx context.Context, name string) (string, error) {
	snap, err := s.c.Collection(JobsCollection).Doc(name).Get(ctx)
	if status.Code(err) == codes.NotFound {
		return "", nil
	}
	if err != nil {
		return "", errs.Backend("read job cursor", err)
	}
	var d cursorDoc
	if err := snap.DataTo(&d); err != nil {
		return "", fmt.Errorf("historystore.Settings.Cursor: %w", err)
	}
	return d.Cursor, nil
}

// SetCursor records where the job called name stopped.
func (s *Settings) SetCursor(ctx context.Context, name, cursor string) error {
	_, err := s.c.Collection(JobsCollection).Doc(name).Set(ctx, cursorDoc{Cursor: cursor, UpdateTime: time.Now().UTC()})
	if err != nil {
		return errs.Backend("write job cursor", err)
	}
	return nil
}

// MarkErasing records that the user's account is being erased: history
// writes are refused from now on, until Delete. The settings are kept.
func (s *Settings) MarkErasing(ctx context.Context, userID string) error {
	_, err := s.c.Collection(SettingsCollection).Doc(DocID(userID)).Set(ctx,
		map[string]any{"erasing": true, "updateTime": time.Now().UTC()}, firestore.MergeAll)
	if err != nil {
		return errs.Backend("mark history settings erasing", err)
	}
	return nil
}

// EraseValues replaces the user's settings by the erasure's mark alone: the
// values are gone (an export shows the defaults), history writes are still
// refused.
func (s *Settings) EraseValues(ctx context.Context, userID string) error {
	_, err := s.c.Collection(SettingsCollection).Doc(DocID(userID)).Set(ctx,
		map[string]any{"erasing": true, "updateTime": time.Now().UTC()})
	if err != nil {
		return errs.Backend("erase history settings", err)
	}
	return nil
}

// Delete deletes the user's settings document, the erasure's mark with it.
func (s *Settings) Delete(ctx context.Context, userID string) error {
	if _, err := s.c.Collection(SettingsCollection).Doc(DocID(userID)).Delete(ctx); err != nil {
		return errs.Backend("delete history settings", err)
	}
	return nil
}
