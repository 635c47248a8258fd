package historystore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/videngage/engagement/shared/counter"
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
	// ExpiryPart is ExpiryPart(user) while auto-delete is on, absent
	// otherwise: the auto-delete job's partitions are ranges of it.
	ExpiryPart *int      `firestore:"expiryPart,omitempty"`
	UpdateTime time.Time `firestore:"updateTime"`
}

// expiryPartField is settingsDoc.ExpiryPart's field.
const expiryPartField = "expiryPart"

// ExpiryPart is the part, in [0, counter.Parts), of the user's settings
// document among the auto-delete job's partitions: a hash of the user id,
// so that partitions hold about as many users whatever the ids look like.
func ExpiryPart(userID string) int {
	h := fnv.New32a()
	h.Write([]byte(userID))
	return int(h.Sum32() % counter.Parts)
}

// newSettingsDoc is the document of v for userID, stamped with its expiry
// part when auto-delete is on.
func newSettingsDoc(userID string, v history.Settings) settingsDoc {
	d := settingsDoc{Settings: v, UpdateTime: time.Now().UTC()}
	if v.AutoDeleteMonths > 0 {
		p := ExpiryPart(userID)
		d.ExpiryPart = &p
	}
	return d
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
		return tx.Set(ref, newSettingsDoc(userID, v))
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
	// Stamped says the document holds its expiry part (ExpiryPart):
	// AutoDeletingIn lists it.
	Stamped bool
}

// AutoDeleting lists up to limit users whose auto-delete is on, in document
// order after the cursor ("": from the first), and returns the cursor after
// the last one listed, or "" when the list is done (fewer than limit
// documents were after the cursor). It is one Firestore query that reads a
// document per user listed. It lists documents written before they held
// their expiry part, which AutoDeletingIn does not.
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
	out, next, err := usersOf(docs)
	if err != nil {
		return nil, after, fmt.Errorf("historystore.Settings.AutoDeleting: %w", err)
	}
	if len(docs) < limit {
		next = ""
	}
	return out, next, nil
}

// AutoDeletingIn lists up to limit users whose auto-delete is on and whose
// expiry part is in [lo, hi), in (part, document) order after the cursor
// ("": from the first), and returns the cursor after the last one listed,
// or "" when the list is done. One Firestore query on one field's range
// (its single-field index), a document read per user listed; users who
// keep everything have no part and are never read.
func (s *Settings) AutoDeletingIn(ctx context.Context, lo, hi int, after string, limit int) ([]UserSettings, string, error) {
	q := s.c.Collection(SettingsCollection).
		Where(expiryPartField, ">=", lo).
		Where(expiryPartField, "<", hi).
		OrderBy(expiryPartField, firestore.Asc).
		OrderBy(firestore.DocumentID, firestore.Asc).
		Limit(limit)
	if after != "" {
		part, id, err := parsePartCursor(after)
		if err != nil {
			return nil, after, fmt.Errorf("historystore.Settings.AutoDeletingIn: %w", err)
		}
		q = q.StartAfter(part, id)
	}
	docs, err := q.Documents(ctx).GetAll()
	if err != nil {
		return nil, after, errs.Backend("list auto-deleting users of a partition", err)
	}
	out, _, err := usersOf(docs)
	if err != nil {
		return nil, after, fmt.Errorf("historystore.Settings.AutoDeletingIn: %w", err)
	}
	next := ""
	if n := len(docs); n == limit {
		var d settingsDoc
		if err := docs[n-1].DataTo(&d); err != nil || d.ExpiryPart == nil {
			return nil, after, fmt.Errorf("historystore.Settings.AutoDeletingIn: %s: no expiry part (%v)", docs[n-1].Ref.ID, err)
		}
		next = strconv.Itoa(*d.ExpiryPart) + "/" + docs[n-1].Ref.ID
	}
	return out, next, nil
}

// parsePartCursor reads AutoDeletingIn's cursor: the part, "/", the
// document id (which holds no "/").
func parsePartCursor(c string) (int, string, error) {
	p, id, ok := strings.Cut(c, "/")
	part, err := strconv.Atoi(p)
	if !ok || err != nil || id == "" {
		return 0, "", fmt.Errorf("bad partition cursor %q", c)
	}
	return part, id, nil
}

// usersOf decodes listed settings documents, skipping any that is not a
// user's; last is the last document's id.
func usersOf(docs []*firestore.DocumentSnapshot) (out []UserSettings, last string, err error) {
	out = make([]UserSettings, 0, len(docs))
	for _, snap := range docs {
		last = snap.Ref.ID
		userID, ok := userOfDocID(snap.Ref.ID)
		if !ok {
			continue // not a user's document
		}
		var d settingsDoc
		if err := snap.DataTo(&d); err != nil {
			return nil, last, fmt.Errorf("%s: %w", snap.Ref.ID, err)
		}
		out = append(out, UserSettings{UserID: userID, Settings: d.Settings, Stamped: d.ExpiryPart != nil})
	}
	return out, last, nil
}

// StampExpiryPart writes the user's expiry part into their settings
// document if auto-delete is on and the document, written before documents
// held it, does not: read and written in one transaction, so a Put racing
// it keeps its own values (which it stamps itself). It reports whether it
// wrote.
func (s *Settings) StampExpiryPart(ctx context.Context, userID string) (bool, error) {
	ref := s.c.Collection(SettingsCollection).Doc(DocID(userID))
	wrote := false
	err := s.c.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		wrote = false
		snap, err := tx.Get(ref)
		if status.Code(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		var d settingsDoc
		if err := snap.DataTo(&d); err != nil {
			return err
		}
		if d.ExpiryPart != nil || d.AutoDeleteMonths == 0 {
			return nil
		}
		wrote = true
		return tx.Update(ref, []firestore.Update{{Path: expiryPartField, Value: ExpiryPart(userID)}})
	})
	if err != nil {
		return false, errs.Backend("stamp history settings' expiry part", err)
	}
	return wrote, nil
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

// JobCursor is where a pass of a history job over the users stands.
type JobCursor struct {
	// Cursor is where the pass stopped ("": it has not begun or is done).
	Cursor string `firestore:"cursor"`
	// PassStarted is when the pass under way, or the last one, began;
	// PassEnded when the last pass that reached the last user ended.
	PassStarted time.Time `firestore:"passStarted,omitempty"`
	PassEnded   time.Time `firestore:"passEnded,omitempty"`
	UpdateTime  time.Time `firestore:"updateTime"`
}

// Cursor is where the job called name stands (the zero JobCursor when it
// never ran).
func (s *Settings) Cursor(ctx context.Context, name string) (JobCursor, error) {
	snap, err := s.c.Collection(JobsCollection).Doc(name).Get(ctx)
	if status.Code(err) == codes.NotFound {
		return JobCursor{}, nil
	}
	if err != nil {
		return JobCursor{}, errs.Backend("read job cursor", err)
	}
	var d JobCursor
	if err := snap.DataTo(&d); err != nil {
		return JobCursor{}, fmt.Errorf("historystore.Settings.Cursor: %w", err)
	}
	return d, nil
}

// Cursors are the cursors of the jobs named, in order, read at once (one
// request).
func (s *Settings) Cursors(ctx context.Context, names []string) ([]JobCursor, error) {
	refs := make([]*firestore.DocumentRef, len(names))
	for i, n := range names {
		refs[i] = s.c.Collection(JobsCollection).Doc(n)
	}
	snaps, err := s.c.GetAll(ctx, refs)
	if err != nil {
		return nil, errs.Backend("read job cursors", err)
	}
	out := make([]JobCursor, len(snaps))
	for i, snap := range snaps {
		if !snap.Exists() {
			continue
		}
		if err := snap.DataTo(&out[i]); err != nil {
			return nil, fmt.Errorf("historystore.Settings.Cursors: %s: %w", names[i], err)
		}
	}
	return out, nil
}

// SetCursor records where the job called name stands.
func (s *Settings) SetCursor(ctx context.Context, name string, c JobCursor) error {
	c.UpdateTime = time.Now().UTC()
	if _, err := s.c.Collection(JobsCollection).Doc(name).Set(ctx, c); err != nil {
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
