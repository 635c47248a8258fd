package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2/google"

	"github.com/videngage/engagement/shared/cache"
	"github.com/videngage/engagement/shared/config"
)

// AccountRecords reads the identity provider's record of accounts: when
// Identity Platform (Firebase Authentication) created each, through the
// Identity Toolkit API's accounts:lookup. The ID token does not carry it
// (auth_time is the last sign-in, not the sign-up). It also deletes an
// account (accounts:delete), the last of an account's erasure.
type AccountRecords struct {
	client  *http.Client
	url     string // the project's accounts, without the method
	project string
}

// identityScope is the OAuth scope of the Identity Toolkit API.
const identityScope = "https://www.googleapis.com/auth/identitytoolkit"

// lookupBatch is how many accounts one accounts:lookup asks for.
const lookupBatch = 100

// NewAccountRecords reads the records of project's accounts at base (the
// Identity Toolkit API, https://identitytoolkit.googleapis.com), as the
// instance's service account.
func NewAccountRecords(ctx context.Context, base, project string) (*AccountRecords, error) {
	c, err := google.DefaultClient(ctx, identityScope)
	if err != nil {
		return nil, fmt.Errorf("auth.NewAccountRecords: %w", err)
	}
	return NewAccountRecordsWith(c, base, project), nil
}

// AccountRecordsOf returns the account records cfg names: the Identity
// Toolkit API at ACCOUNT_RECORDS_URL as the instance's service account, or,
// with FIREBASE_AUTH_EMULATOR_HOST set (the local stack), the emulator's
// over plain HTTP with the emulator's "owner" token; nil when neither is set.
func AccountRecordsOf(ctx context.Context, cfg *config.Config) (*AccountRecords, error) {
	if host := cfg.Auth.EmulatorHost; host != "" {
		client := &http.Client{Transport: emulatorOwner{http.DefaultTransport}}
		return NewAccountRecordsWith(client, "http://"+host+"/identitytoolkit.googleapis.com", cfg.Auth.Audience), nil
	}
	if u := cfg.Moderation.AccountRecordsURL; u != "" {
		return NewAccountRecords(ctx, u, cfg.Auth.Audience)
	}
	return nil, nil
}

// emulatorOwner authorises requests to the Firebase Auth emulator as its
// administrator, as the Admin SDKs do.
type emulatorOwner struct{ next http.RoundTripper }

func (t emulatorOwner) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer owner")
	return t.next.RoundTrip(r)
}

// NewAccountRecordsWith reads the records through client (which adds the
// credentials), at base.
func NewAccountRecordsWith(client *http.Client, base, project string) *AccountRecords {
	return &AccountRecords{client: client, url: strings.TrimSuffix(base, "/") + "/v1/projects/" + project + "/accounts", project: project}
}

// Created returns when the identity provider created each of uids; an
// account it has no record of is left out.
func (a *AccountRecords) Created(ctx context.Context, uids []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for i := 0; i < len(uids); i += lookupBatch {
		if err := a.lookup(ctx, uids[i:min(i+lookupBatch, len(uids))], out); err != nil {
			return nil, fmt.Errorf("auth.AccountRecords.Created: %w", err)
		}
	}
	return out, nil
}

// Delete deletes uid's account (accounts:delete). An account the provider
// does not know (already deleted, or never made) counts as deleted, so a
// repeated Delete succeeds; any other refusal or failure is an error and the
// caller tries again.
func (a *AccountRecords) Delete(ctx context.Context, uid string) error {
	status, data, err := a.call(ctx, "delete", struct {
		LocalID string `json:"localId"`
	}{uid})
	if err != nil {
		return fmt.Errorf("auth.AccountRecords.Delete: %w", err)
	}
	if status == http.StatusOK || userNotFound(status, data) {
		return nil
	}
	return fmt.Errorf("auth.AccountRecords.Delete: accounts:delete: %d: %.200s", status, data)
}

// userNotFound reports whether an Identity Toolkit answer is its refusal
// of an account it does not know: 400 with the message USER_NOT_FOUND.
func userNotFound(status int, data []byte) bool {
	var answer struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	return status == http.StatusBadRequest && json.Unmarshal(data, &answer) == nil &&
		strings.HasPrefix(answer.Error.Message, "USER_NOT_FOUND")
}

// call posts body to the project's accounts:method and returns the answer's
// status and body.
func (a *AccountRecords) call(ctx context.Context, method string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url+":"+method, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		return 0, nil, err
	}
	return res.StatusCode, data, nil
}

func (a *AccountRecords) lookup(ctx context.Context, uids []string, out map[string]time.Time) error {
	status, data, err := a.call(ctx, "lookup", struct {
		LocalID []string `json:"localId"`
	}{uids})
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("accounts:lookup: %d: %.200s", status, data)
	}
	var answer struct {
		Users []struct {
			LocalID   string `json:"localId"`
			CreatedAt string `json:"createdAt"` // milliseconds since the epoch
		} `json:"users"`
	}
	if err := json.Unmarshal(data, &answer); err != nil {
		return fmt.Errorf("accounts:lookup: %w", err)
	}
	for _, u := range answer.Users {
		ms, err := strconv.ParseInt(u.CreatedAt, 10, 64)
		if err != nil || u.LocalID == "" {
			continue // no creation time: the first reaction answers for it
		}
		out[u.LocalID] = time.UnixMilli(ms).UTC()
	}
	return nil
}

// AccountCreation answers when the identity provider created an account,
// from its records, and remembers the answer on the instance: a creation time
// never changes, so an instance asks once per account it sees (up to its
// cache's size), not once per request.
type AccountCreation struct {
	records *AccountRecords
	known   *cache.Map[string, time.Time]
}

// NewAccountCreation answers from records, remembering up to max accounts
// (0: none).
func NewAccountCreation(records *AccountRecords, max int) *AccountCreation {
	return &AccountCreation{records: records, known: cache.New[string, time.Time](max, nil)}
}

// Created returns when uid's account was created; zero when the provider
// has no record of it (or no creation time).
func (a *AccountCreation) Created(ctx context.Context, uid string) (time.Time, error) {
	if t, ok := a.known.Get(uid); ok {
		return t, nil
	}
	got, err := a.records.Created(ctx, []string{uid})
	if err != nil {
		return time.Time{}, err
	}
	a.known.Put(uid, got[uid])
	return got[uid], nil
}

// CreatedMany returns when each of uids was created (zero when the provider
// has no record), asking the provider in one lookup for those the instance
// has not seen.
func (a *AccountCreation) CreatedMany(ctx context.Context, uids []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(uids))
	var missing []string
	for _, u := range uids {
		if t, ok := a.known.Get(u); ok {
			out[u] = t
		} else if _, dup := out[u]; !dup {
			out[u] = time.Time{}
			missing = append(missing, u)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	got, err := a.records.Created(ctx, missing)
	if err != nil {
		return nil, err
	}
	for _, u := range missing {
		a.known.Put(u, got[u])
		out[u] = got[u]
	}
	return out, nil
}
