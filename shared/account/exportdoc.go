package account

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"time"

	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/reaction"
)

// Interfaces of the stores an export reads, each a page at a time.
type (
	ExportReactions interface {
		ListByUser(ctx context.Context, userID, after string, limit int) ([]reaction.UserReaction, error)
	}
	ExportComments interface {
		ListByAuthor(ctx context.Context, userID, after string, limit int) ([]comment.Comment, error)
	}
	ExportHistory interface {
		List(ctx context.Context, userID string, after *history.Cursor, horizon time.Time, size int) (history.Page, error)
	}
	ExportSettings interface {
		Get(ctx context.Context, userID string) (history.Settings, error)
	}
	// ExportModeration reads the audit trail's entries about the user.
	ExportModeration interface {
		List(ctx context.Context, f moderation.Filter, after *moderation.EntryCursor, limit int) ([]moderation.Entry, *moderation.EntryCursor, error)
	}
)

// Exporter writes a user's export, everything held about them, as one JSON
// document: {"kind":"export","reactions":[…],"comments":[…],"history":[…],
// "moderation":[…],"settings":{…}} (kind tells it from the link to a
// prepared export, GET /v1/me/export's other answer). Each store is read a page at a time and each item
// written as it is read, so that the writer holds one page, never the
// account: the streamed export (GET /v1/me/export) and the prepared one
// (PrepareExport) write the same bytes through it.
type Exporter struct {
	Reactions  ExportReactions
	Comments   ExportComments
	History    ExportHistory
	Settings   ExportSettings
	Moderation ExportModeration
}

// Page sizes of the export's reads: each page is one bounded read.
const (
	exportReactionPage = 500
	exportCommentPage  = 200
	exportHistoryPage  = 1000
	exportActionPage   = 500
)

// FirstPages are the pages an export reads before it writes anything: a
// backend down then fails the export before its answer starts, and their
// size decides whether the export is streamed or prepared.
type FirstPages struct {
	Reactions []reaction.UserReaction
	History   history.Page
}

// Size is the reactions and history entries of the first pages.
func (f FirstPages) Size() int { return len(f.Reactions) + len(f.History.Entries) }

// FirstPages reads the user's first pages.
func (e Exporter) FirstPages(ctx context.Context, userID string) (FirstPages, error) {
	var f FirstPages
	var err error
	if f.Reactions, err = e.Reactions.ListByUser(ctx, userID, "", exportReactionPage); err != nil {
		return f, err
	}
	f.History, err = e.History.List(ctx, userID, nil, time.Time{}, exportHistoryPage)
	return f, err
}

type reactionJSON struct {
	ContentID  string    `json:"contentId"`
	Reaction   string    `json:"reaction"`
	Version    int64     `json:"version"`
	UpdateTime time.Time `json:"updateTime"`
}

type commentJSON struct {
	ID         string    `json:"id"`
	VideoID    string    `json:"videoId"`
	ParentID   string    `json:"parentId,omitempty"`
	Text       string    `json:"text"`
	Status     string    `json:"status"`
	CreateTime time.Time `json:"createTime"`
	UpdateTime time.Time `json:"updateTime"`
}

type entryJSON struct {
	VideoID         string    `json:"videoId"`
	WatchedAt       time.Time `json:"watchedAt"`
	PositionSeconds float64   `json:"positionSeconds"`
}

// Write writes the user's export to w, starting from first (read by
// FirstPages), and returns the first error of a store or of w: the document
// is whole only when it returns nil.
func (e Exporter) Write(ctx context.Context, w io.Writer, userID string, first FirstPages) error {
	s := newObjectStream(w)
	s.name("kind")
	s.raw(`"export"`)
	page := first.Reactions
	s.beginArray("reactions")
	for len(page) > 0 {
		for _, r := range page {
			s.item(reactionJSON{ContentID: r.ContentID, Reaction: string(r.State.Current()), Version: r.State.Tag(), UpdateTime: r.UpdateTime.UTC()})
		}
		if s.err != nil || len(page) < exportReactionPage {
			break
		}
		var err error
		if page, err = e.Reactions.ListByUser(ctx, userID, page[len(page)-1].ContentID, exportReactionPage); err != nil {
			return err
		}
	}
	s.endArray()

	s.beginArray("comments")
	for lastID := ""; s.err == nil; {
		cs, err := e.Comments.ListByAuthor(ctx, userID, lastID, exportCommentPage)
		if err != nil {
			return err
		}
		for _, c := range cs {
			s.item(commentJSON{ID: c.ID, VideoID: c.VideoID, ParentID: c.ParentID, Text: c.Text, Status: string(c.Status),
				CreateTime: c.CreateTime.UTC(), UpdateTime: c.UpdateTime.UTC()})
		}
		if len(cs) < exportCommentPage {
			break
		}
		lastID = cs[len(cs)-1].ID
	}
	s.endArray()

	// Every entry held, also those past the user's auto-delete horizon that
	// are not deleted yet: the export shows what is stored, not what the
	// history listing shows.
	s.beginArray("history")
	var after *history.Cursor
	for p := first.History; s.err == nil; {
		if after != nil {
			var err error
			if p, err = e.History.List(ctx, userID, after, time.Time{}, exportHistoryPage); err != nil {
				return err
			}
		}
		for _, en := range p.Entries {
			s.item(entryJSON{VideoID: en.VideoID, WatchedAt: en.WatchedAt.UTC(), PositionSeconds: en.PositionSeconds})
		}
		if p.Next == nil {
			break
		}
		after = p.Next
	}
	s.endArray()

	// The moderation audit trail's entries about the user: one key range.
	s.beginArray("moderation")
	var afterAction *moderation.EntryCursor
	for s.err == nil {
		es, next, err := e.Moderation.List(ctx, moderation.Filter{UserID: userID}, afterAction, exportActionPage)
		if err != nil {
			return err
		}
		for _, en := range es {
			s.item(en)
		}
		if next == nil {
			break
		}
		afterAction = next
	}
	s.endArray()

	settings, err := e.Settings.Get(ctx, userID)
	if err != nil {
		return err
	}
	s.member("settings", settings)
	return s.end()
}

// objectStream writes one JSON object a member at a time, an array member
// an item at a time, so that a document of any size passes through bounded
// memory. The first write error sticks and ends the stream.
type objectStream struct {
	w       io.Writer
	enc     *json.Encoder
	err     error
	members int
	items   int
}

func newObjectStream(w io.Writer) *objectStream {
	s := &objectStream{w: w, enc: json.NewEncoder(w)}
	s.raw("{")
	return s
}

func (s *objectStream) raw(text string) {
	if s.err == nil {
		_, s.err = io.WriteString(s.w, text)
	}
}

func (s *objectStream) name(n string) {
	if s.members > 0 {
		s.raw(",")
	}
	s.members++
	s.raw(strconv.Quote(n) + ":")
}

// beginArray opens the array member n; item adds to it and endArray closes it.
func (s *objectStream) beginArray(n string) {
	s.name(n)
	s.raw("[")
	s.items = 0
}

func (s *objectStream) item(v any) {
	if s.items > 0 {
		s.raw(",")
	}
	s.items++
	if s.err == nil {
		s.err = s.enc.Encode(v)
	}
}

func (s *objectStream) endArray() { s.raw("]") }

// member writes the member n with the value v.
func (s *objectStream) member(n string, v any) {
	s.name(n)
	if s.err == nil {
		s.err = s.enc.Encode(v)
	}
}

// end closes the object; it returns the first error of the stream.
func (s *objectStream) end() error {
	s.raw("}\n")
	return s.err
}
