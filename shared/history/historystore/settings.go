package historystore

import (
	"context"
	"encoding/base64"
	"fmt"
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

// Put replaces the user's settings.
func (s *Settings) Put(ctx context.Context, userID string, v history.Settings) error {
	_, err := s.c.Collection(SettingsCollection).Doc(DocID(userID)).Set(ctx, settingsDoc{Settings: v, UpdateTime: time.Now().UTC()})
	if err != nil {
		return errs.Backend("write history settings", err)
	}
	return nil
}
