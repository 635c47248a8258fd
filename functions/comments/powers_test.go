package commentsfn_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
)

// TestEveryModeratorPowerIsGatedAndAudited: each power a moderator's token
// gives over others — flag, unflag, spam mark, delete of another's comment
// — is refused (403) while an operator's revocation of the moderator
// stands, and writes nothing; admitted, each writes exactly one audit entry
// with the moderator's user id and reason. Deleting one's own comment is no
// moderation power: a revoked moderator may still, and it is not audited.
func TestEveryModeratorPowerIsGatedAndAudited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	trail := moderationstore.New(e.db, moderationstore.Gate{})
	entries := func(user string) []moderation.Entry {
		t.Helper()
		es, _, err := trail.List(ctx, moderation.Filter{UserID: user}, nil, 100)
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	spamTarget := e.post("alice", "vid", "", "buy now")
	deleteTarget := e.post("bob", "vid", "", "rude")
	own := e.post("mod", "vid", "", "mine")
	powers := []struct {
		name, method, path string
		body               map[string]any
		target             string // whose trail the entry is in
		action             moderation.Action
	}{
		{"flag", "POST", "/v1/moderation/flagged-users", map[string]any{"userIds": []string{"carol"}, "flagged": true, "reason": "r-flag"}, "carol", moderation.ActionFlag},
		{"unflag", "POST", "/v1/moderation/flagged-users", map[string]any{"userIds": []string{"dave"}, "flagged": false, "reason": "r-unflag"}, "dave", moderation.ActionUnflag},
		{"spam", "POST", "/v1/moderation/spam", map[string]any{"commentIds": []string{spamTarget.ID}, "reason": "r-spam"}, "alice", moderation.ActionSpam},
		{"delete", "DELETE", "/v1/comments/" + deleteTarget.ID + "?reason=" + url.QueryEscape("r-delete"), nil, "bob", moderation.ActionDelete},
	}

	if _, err := trail.Revoke(ctx, "mod", "ops", "stolen token"); err != nil {
		t.Fatal(err)
	}
	for _, p := range powers {
		apitest.CheckError(t, "revoked "+p.name, e.do(p.method, p.path, e.moderator("mod"), p.body), 403, "PERMISSION_DENIED", errs.ModeratorRevoked)
		if es := entries(p.target); len(es) != 0 {
			t.Errorf("revoked %s wrote %+v", p.name, es)
		}
	}
	if got := e.list("/v1/videos/vid/comments"); len(got.Comments) != 3 {
		t.Errorf("after the refused powers %d comments are visible, want 3", len(got.Comments))
	}
	e.do("DELETE", "/v1/comments/"+own.ID, e.moderator("mod"), nil).Want(t, 204, "a revoked moderator's own comment")
	if es := entries("mod"); len(es) != 1 || es[0].Action != moderation.ActionRevoke {
		t.Errorf("mod's trail after deleting their own comment: %+v, want the revocation only", es)
	}

	if _, err := trail.Restore(ctx, "mod", "ops", "new device"); err != nil {
		t.Fatal(err)
	}
	for _, p := range powers {
		r := e.do(p.method, p.path, e.moderator("mod"), p.body)
		if r.Code/100 != 2 {
			t.Fatalf("%s: %d %s", p.name, r.Code, r.Body)
		}
		es := entries(p.target)
		if len(es) != 1 {
			t.Fatalf("%s wrote %d entries, want 1: %+v", p.name, len(es), es)
		}
		if x := es[0]; x.Action != p.action || x.Actor != "mod" || x.ActorKind != moderation.ActorModerator || x.Reason != "r-"+p.name {
			t.Errorf("%s: entry %+v", p.name, x)
		}
	}
	if es := entries("bob"); es[0].CommentID != deleteTarget.ID || es[0].VideoID != "vid" || !es[0].Changed {
		t.Errorf("the delete's entry %+v", es[0])
	}
	// A delete's reason is a moderator's words, bounded as the others are.
	c := e.post("erin", "vid", "", "x")
	long := make([]byte, moderation.MaxReasonChars+1)
	for i := range long {
		long[i] = 'x'
	}
	apitest.CheckError(t, "reason too long", e.do("DELETE", "/v1/comments/"+c.ID+"?reason="+string(long), e.moderator("mod"), nil), 400, "INVALID_ARGUMENT", errs.InvalidValue)
}
