// Package commentstore keeps comments in Spanner, the source of truth of the
// comments and replies counts: posts recorded with their counter deltas in
// the PendingDeltas outbox in the same transaction (group-committed by
// Writer), removals (delete, spam) whose status check and decrements commit
// together, the listings, and the comments' side of reconciliation.
package commentstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/spannerdb"
)

// Tables (shared/topology/ddl/030_comments.sql).
const (
	tableComments = "Comments"
	tableRequests = "CommentRequests"
	tableLimits   = "CommentRateLimits"
	indexReplies  = "RepliesByParent"
)

// commentColumns are read by scanComment, in its order.
var commentColumns = []string{"CommentId", "VideoId", "ParentId", "AuthorId", "Text", "Status", "CreateTime", "UpdateTime"}

// The listing indexes, forced. The emulator refuses a query on a
// NULL_FILTERED index unless it can prove the query excludes NULLs (it cannot
// for IN UNNEST or GROUP BY) or the hint says so; Cloud Spanner ignores the
// hint.
const (
	fromCommentsByVideo = "Comments@{FORCE_INDEX=CommentsByVideoBucket, spanner_emulator.disable_query_null_filtered_index_check=true}"
	fromRepliesByParent = "Comments@{FORCE_INDEX=RepliesByParent, spanner_emulator.disable_query_null_filtered_index_check=true}"
)

const commentSelect = "CommentId, VideoId, ParentId, AuthorId, Text, Status, CreateTime, UpdateTime"

// Errors of the store; the function maps them to answers.
var (
	// ErrNotFound: no such comment (or, for a replies listing, no visible one).
	ErrNotFound = fmt.Errorf("commentstore: comment %w", spannerdb.ErrNotFound)
	// ErrPermissionDenied: the caller is neither the author nor a moderator.
	ErrPermissionDenied = errs.New(errs.NotAuthor, "", "only the author of the comment or a moderator may delete it")
	// ErrKeyReused: the Idempotency-Key was used by this user for another comment.
	ErrKeyReused = errs.New(errs.IdempotencyKeyReused, "Idempotency-Key", "this Idempotency-Key was already used for another comment; send a new key with a new comment")
)

// Store is the comments' Spanner store.
type Store struct {
	db *spannerdb.DB
	// limit is the per-user post rate, kept as one GCRA timestamp per user
	// in the post's own transaction (the reactions' limiter, over its own
	// table); PerMinute 0 is no limit.
	limit ratelimit.GCRA
	// spam are the rules against comment spam, and youngLimit the rate of
	// young accounts' posts (PerMinute 0: the ordinary limit), over the
	// same timestamp.
	spam       comment.SpamRules
	youngLimit ratelimit.GCRA
	now        func() time.Time
	// gate admits moderators' spam marks.
	gate moderationstore.Gate
}

// New returns the store. postsPerMinute ≤ 0 switches the rate limit off.
func New(db *spannerdb.DB, postsPerMinute int) *Store {
	return &Store{db: db, limit: ratelimit.GCRA{PerMinute: max(postsPerMinute, 0)}, now: time.Now}
}

// GateModeration admits moderators' spam marks through g (the zero Gate
// checks revocations only); it returns s.
func (s *Store) GateModeration(g moderationstore.Gate) *Store {
	s.gate = g
	return s
}

// RefuseSpam applies rules to posts, with young accounts limited to
// youngPerMinute posts a minute (0: the ordinary limit); it returns s.
func (s *Store) RefuseSpam(rules comment.SpamRules, youngPerMinute int) *Store {
	s.spam, s.youngLimit = rules, ratelimit.GCRA{PerMinute: max(youngPerMinute, 0)}
	return s
}

// CreateRequest is one post.
type CreateRequest struct {
	UserID   string
	VideoID  string
	ParentID string // "" for a top-level comment
	Text     string
	// IdempotencyKey is optional: a retry with the same key from the same
	// user returns the same comment and counts it once.
	IdempotencyKey string
	// AccountCreated is when the identity provider created the poster's
	// account; zero when it is not known (the account is not young).
	AccountCreated time.Time
}

// CreateResult is the outcome of one CreateRequest.
type CreateResult struct {
	Comment comment.Comment
	// Replayed says the request repeated an Idempotency-Key: Comment is the
	// one the key created, and nothing new was written.
	Replayed bool
	// Event is the post's counter event to publish (nil when replayed).
	Event *events.Event
	// CommitTime is the commit timestamp of the transaction that answered
	// the request (after the comment's CreateTime when replayed).
	CommitTime time.Time
	// Err is this request's own failure: comment.ErrParentNotFound,
	// ErrParentIsReply, ErrParentElsewhere, ErrDuplicateText,
	// ErrYoungAccountLinks, ErrKeyReused, *errs.RateLimitedError or
	// errs.ErrAccountErasing. The others of the batch are unaffected.
	Err error
}

type userKey struct{ user, key string }

type request struct {
	commentID string
	hash      []byte
	index     int // of the request in this batch that created it; -1 when stored
}

// CreateMany records reqs in one read-write transaction: for each, in order,
// the Idempotency-Key lookup, the parent check, the spam rules (a young
// account's links, the same text again), the rate-limit check, the comment
// row, and the outbox rows of its counter deltas (authored by the poster,
// for read-your-own-writes). A refused post writes nothing and moves
// neither the rate limit nor the recent texts.
//
// A post with an Idempotency-Key gets the id comment.KeyedID(user, key), so
// its comment row is the key's record: a retry reads it by id and compares
// its video, parent and text. CommentRequests rows, the keys' records
// before, are still looked up until their deletion policy (a day) has
// removed the last.
func (s *Store) CreateMany(ctx context.Context, reqs []CreateRequest) ([]CreateResult, error) {
	var results []CreateResult
	commitTS, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		results = make([]CreateResult, len(reqs))
		now := s.now()
		// The batch's outbox rows are one key range, which the consumer
		// deletes with one mutation when it counts them.
		batch := outboxstore.NewBatch()
		var reqKeys, userKeys []spanner.Key
		seenUser := map[string]bool{}
		for _, r := range reqs {
			if r.IdempotencyKey != "" {
				reqKeys = append(reqKeys, spanner.Key{r.UserID, r.IdempotencyKey})
			}
			if !seenUser[r.UserID] {
				seenUser[r.UserID] = true
				userKeys = append(userKeys, spanner.Key{r.UserID})
			}
		}
		known := map[userKey]request{}
		if len(reqKeys) > 0 {
			err := tx.Read(ctx, tableRequests, spanner.KeySetFromKeys(reqKeys...),
				[]string{"UserId", "IdempotencyKey", "CommentId", "RequestHash"}).Do(func(r *spanner.Row) error {
				var k userKey
				q := request{index: -1}
				if err := r.Columns(&k.user, &k.key, &q.commentID, &q.hash); err != nil {
					return err
				}
				known[k] = q
				return nil
			})
			if err != nil {
				return fmt.Errorf("read idempotency keys: %w", err)
			}
		}
		var commentKeys []spanner.Key
		for _, r := range reqs {
			if r.ParentID != "" {
				commentKeys = append(commentKeys, spanner.Key{r.ParentID})
			}
			if r.IdempotencyKey != "" {
				commentKeys = append(commentKeys, spanner.Key{comment.KeyedID(r.UserID, r.IdempotencyKey)})
			}
		}
		for _, q := range known {
			commentKeys = append(commentKeys, spanner.Key{q.commentID})
		}
		stored, err := readComments(ctx, tx, commentKeys)
		if err != nil {
			return err
		}
		// A key's comment, found by its id, is what the key posted: its
		// video, parent and text are the request's fingerprint.
		for _, r := range reqs {
			k := userKey{r.UserID, r.IdempotencyKey}
			if _, ok := known[k]; ok || r.IdempotencyKey == "" {
				continue
			}
			if c, ok := stored[comment.KeyedID(r.UserID, r.IdempotencyKey)]; ok && c.AuthorID == r.UserID {
				known[k] = request{commentID: c.ID, hash: comment.RequestHash(c.VideoID, c.ParentID, c.Text), index: -1}
			}
		}
		posters, err := s.readPosters(ctx, tx, userKeys)
		if err != nil {
			return err
		}
		limits := posters.limits
		erasing, err := accountstore.Erasing(ctx, tx, userKeys)
		if err != nil {
			return err
		}
		var ms []*spanner.Mutation
		var posted []events.Event
		for i, r := range reqs {
			res := &results[i]
			if erasing[r.UserID] {
				res.Err = errs.ErrAccountErasing
				continue
			}
			hash := comment.RequestHash(r.VideoID, r.ParentID, r.Text)
			k := userKey{r.UserID, r.IdempotencyKey}
			if q, ok := known[k]; ok && r.IdempotencyKey != "" {
				if string(q.hash) != string(hash) {
					res.Err = ErrKeyReused
					continue
				}
				res.Replayed = true
				if q.index >= 0 {
					res.Comment = results[q.index].Comment
					continue
				}
				c, ok := stored[q.commentID]
				if !ok {
					// The key outlived its comment's row: the rows are never
					// deleted, so the store is inconsistent.
					return fmt.Errorf("idempotency key of %s names missing comment %s", r.UserID, q.commentID)
				}
				res.Comment = c
				continue
			}
			if r.ParentID != "" {
				p, ok := stored[r.ParentID]
				if err := comment.CheckParent(r.VideoID, p, ok); err != nil {
					res.Err = err
					continue
				}
			}
			young := s.spam.Young(r.AccountCreated, now)
			if young && comment.CountLinks(r.Text) > 0 {
				res.Err = comment.ErrYoungAccountLinks
				continue
			}
			digest := comment.DigestText(r.UserID, r.Text)
			if posters.recent[r.UserID].Seen(digest, now, s.spam.DuplicateWindow) {
				res.Err = comment.ErrDuplicateText
				continue
			}
			limit := s.limit
			if young && s.youngLimit.PerMinute > 0 {
				limit = s.youngLimit
			}
			if ok, wait := limits.AllowUnder(limit, r.UserID, now); !ok {
				res.Err = &errs.RateLimitedError{What: "comments", RetryAfter: wait}
				continue
			}
			posters.posted(r.UserID, digest, now)
			id := comment.NewID()
			if r.IdempotencyKey != "" {
				id = comment.KeyedID(r.UserID, r.IdempotencyKey)
				known[k] = request{commentID: id, hash: hash, index: i}
			}
			c := comment.Comment{
				ID: id, VideoID: r.VideoID, ParentID: r.ParentID, AuthorID: r.UserID,
				Text: r.Text, Status: comment.Visible,
			}
			res.Comment = c
			ev := comment.PostEvent(c, now)
			ev.ID = outboxstore.BatchedID(batch, ev.ID)
			res.Event = &ev
			lv, lp := c.Listed()
			ms = append(ms, spanner.Insert(tableComments,
				[]string{"CommentId", "VideoId", "ParentId", "AuthorId", "Text", "Status", "CreateTime", "UpdateTime", "ListedVideoId", "ListedParentId"},
				[]any{c.ID, c.VideoID, nullString(c.ParentID), c.AuthorID, c.Text, string(c.Status), spanner.CommitTimestamp, spanner.CommitTimestamp, nullString(lv), nullString(lp)}))
			ms = append(ms, outboxstore.Pending(ev, r.UserID)...)
			posted = append(posted, ev)
		}
		tally, err := tallyMutations(ctx, tx, posted)
		if err != nil {
			return err
		}
		ms = append(ms, tally...)
		ms = append(ms, posters.mutations(now)...)
		if len(ms) == 0 {
			return nil
		}
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return nil, fmt.Errorf("commentstore.CreateMany: %w", err)
	}
	for i := range results {
		c := &results[i].Comment
		if results[i].Err == nil && c.CreateTime.IsZero() {
			// Created by this transaction (or replayed from a request of it).
			c.CreateTime, c.UpdateTime = commitTS, commitTS
		}
		results[i].CommitTime = commitTS
	}
	return results, nil
}

// posters are the state of a batch's posters in CommentRateLimits: the rate
// limit's timestamps and the digests of their recent texts.
type posters struct {
	limits *ratelimit.UserLimits
	window time.Duration
	recent map[string]comment.RecentTexts
	// changed are the users whose recent texts a post of the batch moved.
	changed map[string]bool
}

// readPosters reads the posters' rows, when a rule needs them.
func (s *Store) readPosters(ctx context.Context, tx *spanner.ReadWriteTransaction, users []spanner.Key) (*posters, error) {
	p := &posters{window: s.spam.DuplicateWindow, recent: map[string]comment.RecentTexts{}, changed: map[string]bool{}}
	tats := map[string]time.Time{}
	if s.limit.PerMinute > 0 || s.youngLimit.PerMinute > 0 || p.window > 0 {
		err := tx.Read(ctx, tableLimits, spanner.KeySetFromKeys(users...), []string{"UserId", "Tat", "RecentTexts"}).Do(func(r *spanner.Row) error {
			var u string
			var t time.Time
			var recent []byte
			if err := r.Columns(&u, &t, &recent); err != nil {
				return err
			}
			tats[u], p.recent[u] = t, comment.DecodeRecentTexts(recent)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read posters: %w", err)
		}
	}
	p.limits = ratelimit.NewUserLimits(tableLimits, s.limit, tats)
	return p, nil
}

// posted records a post of user's text (its digest) at now.
func (p *posters) posted(user string, d comment.TextDigest, now time.Time) {
	if p.window <= 0 {
		return
	}
	p.recent[user] = p.recent[user].Add(d, now, p.window)
	p.changed[user] = true
}

// mutations write back what the batch moved, one write a poster's row. A
// row written for its recent texts alone keeps a timestamp of at least now,
// so that the row's deletion policy (a day after Tat) does not take the
// texts within the window. While the recent texts are kept, every poster
// whose timestamp the limit moved posted, so is among changed, and the
// timestamp the limit moved (later than now) is the one written here.
func (p *posters) mutations(now time.Time) []*spanner.Mutation {
	if p.window <= 0 {
		return p.limits.Mutations()
	}
	var ms []*spanner.Mutation
	for u := range p.changed {
		tat := p.limits.TAT(u)
		if tat.Before(now) {
			tat = now
		}
		ms = append(ms, spanner.InsertOrUpdate(tableLimits, []string{"UserId", "Tat", "RecentTexts"}, []any{u, tat, p.recent[u].Encode()}))
	}
	return ms
}

// Get returns one comment, whatever its status.
func (s *Store) Get(ctx context.Context, id string) (comment.Comment, error) {
	row, err := s.db.Single().ReadRow(ctx, tableComments, spanner.Key{id}, commentColumns)
	if spanner.ErrCode(err) == 5 { // NotFound
		return comment.Comment{}, ErrNotFound
	}
	if err != nil {
		return comment.Comment{}, fmt.Errorf("commentstore.Get: %w", spannerdb.Map(err))
	}
	return scanComment(row)
}

// Page is one page of a listing.
type Page struct {
	Comments []comment.Comment
	// Next is the cursor of the following page; nil on the last page.
	Next *comment.Cursor
}

// listBuckets is how many ranges of the video listing index a video's
// comments are spread over (Comments.ListBucket, 045_jobs.sql).
const listBuckets = 8

// ListVideo returns a page of the video's visible top-level comments, newest
// first, after the cursor. Each bucket of the index gives its first page
// after the cursor (a bounded range read), and the merge of the buckets
// keeps the first size: the order, (CreateTime, CommentId) descending, and
// so the cursors are those of one index.
func (s *Store) ListVideo(ctx context.Context, videoID string, after *comment.Cursor, size int) (Page, error) {
	params := map[string]any{"scope": videoID, "limit": int64(size + 1)}
	cond := ""
	if after != nil {
		cond = ` AND (CreateTime < @t OR (CreateTime = @t AND CommentId < @id))`
		params["t"], params["id"] = after.CreateTime, after.CommentID
	}
	parts := make([]string, listBuckets)
	for b := range listBuckets {
		parts[b] = fmt.Sprintf(`(SELECT %s FROM %s WHERE ListedVideoId = @scope AND ListBucket = %d%s
ORDER BY CreateTime DESC, CommentId DESC LIMIT @limit)`, commentSelect, fromCommentsByVideo, b, cond)
	}
	sql := `SELECT ` + commentSelect + ` FROM (` + strings.Join(parts, "\nUNION ALL\n") + `)
ORDER BY CreateTime DESC, CommentId DESC LIMIT @limit`
	tx := s.db.Single()
	page, err := queryPage(ctx, tx, spanner.Statement{SQL: sql, Params: params}, size)
	if err != nil {
		return Page{}, fmt.Errorf("commentstore.ListVideo: %w", err)
	}
	return page, nil
}

// ListReplies returns a page of the comment's visible replies, oldest first,
// after the cursor. A comment that does not exist or is not visible is
// ErrNotFound; a reply has no replies (threads are one level deep).
func (s *Store) ListReplies(ctx context.Context, parentID string, after *comment.Cursor, size int) (Page, error) {
	var page Page
	err := s.db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
		row, err := tx.ReadRow(ctx, tableComments, spanner.Key{parentID}, commentColumns)
		if spanner.ErrCode(err) == codes.NotFound {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		parent, err := scanComment(row)
		if err != nil {
			return err
		}
		if parent.Status != comment.Visible {
			return ErrNotFound
		}
		if parent.IsReply() {
			page = Page{Comments: []comment.Comment{}}
			return nil
		}
		sql := `SELECT ` + commentSelect + ` FROM ` + fromRepliesByParent + `
WHERE ListedParentId = @scope`
		params := map[string]any{"scope": parentID, "limit": int64(size + 1)}
		if after != nil {
			sql += ` AND (CreateTime > @t OR (CreateTime = @t AND CommentId > @id))`
			params["t"], params["id"] = after.CreateTime, after.CommentID
		}
		sql += ` ORDER BY CreateTime, CommentId LIMIT @limit`
		page, err = queryPage(ctx, tx, spanner.Statement{SQL: sql, Params: params}, size)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return Page{}, ErrNotFound
	}
	if err != nil {
		return Page{}, fmt.Errorf("commentstore.ListReplies: %w", err)
	}
	return page, nil
}

func queryPage(ctx context.Context, tx *spanner.ReadOnlyTransaction, stmt spanner.Statement, size int) (Page, error) {
	page := Page{Comments: []comment.Comment{}}
	err := tx.Query(ctx, stmt).Do(func(r *spanner.Row) error {
		c, err := scanComment(r)
		if err != nil {
			return err
		}
		page.Comments = append(page.Comments, c)
		return nil
	})
	if err != nil {
		return Page{}, spannerdb.Map(err)
	}
	if len(page.Comments) > size {
		page.Comments = page.Comments[:size]
		next := comment.CursorOf(page.Comments[size-1])
		page.Next = &next
	}
	return page, nil
}

func readComments(ctx context.Context, tx *spanner.ReadWriteTransaction, keys []spanner.Key) (map[string]comment.Comment, error) {
	out := map[string]comment.Comment{}
	if len(keys) == 0 {
		return out, nil
	}
	err := tx.Read(ctx, tableComments, spanner.KeySetFromKeys(keys...), commentColumns).Do(func(r *spanner.Row) error {
		c, err := scanComment(r)
		if err != nil {
			return err
		}
		out[c.ID] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read comments: %w", err)
	}
	return out, nil
}

func scanComment(r *spanner.Row) (comment.Comment, error) {
	var c comment.Comment
	var parent spanner.NullString
	var status string
	if err := r.Columns(&c.ID, &c.VideoID, &parent, &c.AuthorID, &c.Text, &status, &c.CreateTime, &c.UpdateTime); err != nil {
		return comment.Comment{}, fmt.Errorf("scan comment: %w", err)
	}
	c.ParentID = parent.StringVal
	st, err := comment.ParseStatus(status)
	if err != nil {
		return comment.Comment{}, err
	}
	c.Status = st
	return c, nil
}

func nullString(s string) spanner.NullString {
	return spanner.NullString{StringVal: s, Valid: s != ""}
}
