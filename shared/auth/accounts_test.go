package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Created asks accounts:lookup for at most 100 accounts a call and returns
// the creation times the provider has; accounts it does not know are left
// out; a refusal is an error.
func TestAccountRecordsCreated(t *testing.T) {
	created := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	var calls []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/projects/p1/accounts:lookup" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		var body struct {
			LocalID []string `json:"localId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		calls = append(calls, len(body.LocalID))
		type user struct {
			LocalID   string `json:"localId"`
			CreatedAt string `json:"createdAt,omitempty"`
		}
		var users []user
		for _, id := range body.LocalID {
			switch id {
			case "unknown":
			case "no-time":
				users = append(users, user{LocalID: id})
			default:
				users = append(users, user{id, fmt.Sprint(created.UnixMilli())})
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"users": users})
	}))
	defer srv.Close()
	a := NewAccountRecordsWith(srv.Client(), srv.URL+"/", "p1")
	uids := []string{"unknown", "no-time"}
	for i := range 150 {
		uids = append(uids, fmt.Sprint("u", i))
	}
	got, err := a.Created(context.Background(), uids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 150 || !got["u0"].Equal(created) || !got["u149"].Equal(created) {
		t.Errorf("created: %d accounts, u0 %v", len(got), got["u0"])
	}
	if len(calls) != 2 || calls[0] != 100 || calls[1] != 52 {
		t.Errorf("calls of %v accounts, want 100 and 52", calls)
	}
	if _, err := NewAccountRecordsWith(srv.Client(), srv.URL, "other").Created(context.Background(), []string{"u1"}); err == nil {
		t.Error("a refused lookup: no error")
	}
}

// AccountCreation asks the provider once per account, whether or not it has
// a record, and answers later requests from the instance's memory.
func TestAccountCreationRemembers(t *testing.T) {
	created := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			LocalID []string `json:"localId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		users := []map[string]string{}
		for _, id := range body.LocalID {
			calls[id]++
			if id == "down" {
				http.Error(w, "unavailable", http.StatusServiceUnavailable)
				return
			}
			if id != "unknown" {
				users = append(users, map[string]string{"localId": id, "createdAt": fmt.Sprint(created.UnixMilli())})
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"users": users})
	}))
	defer srv.Close()
	a := NewAccountCreation(NewAccountRecordsWith(srv.Client(), srv.URL, "p1"), 10)
	ctx := context.Background()
	for range 3 {
		if got, err := a.Created(ctx, "alice"); err != nil || !got.Equal(created) {
			t.Fatalf("alice: %v, %v", got, err)
		}
		if got, err := a.Created(ctx, "unknown"); err != nil || !got.IsZero() {
			t.Fatalf("unknown: %v, %v", got, err)
		}
		if _, err := a.Created(ctx, "down"); err == nil {
			t.Fatal("a failed lookup: no error")
		}
	}
	// A failure is not remembered: the next request asks again.
	if want := map[string]int{"alice": 1, "unknown": 1, "down": 3}; !maps.Equal(calls, want) {
		t.Errorf("lookups %v, want %v", calls, want)
	}
}

// Delete posts {"localId": uid} to accounts:delete; an account the provider
// does not know (400 USER_NOT_FOUND, as the Identity Toolkit API answers)
// counts as deleted; any other refusal or failure is an error to retry.
func TestAccountRecordsDelete(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/projects/p1/accounts:delete" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		var body struct {
			LocalID string `json:"localId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		asked = append(asked, body.LocalID)
		w.Header().Set("Content-Type", "application/json")
		switch body.LocalID {
		case "gone":
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"code":400,"message":"USER_NOT_FOUND","errors":[{"message":"USER_NOT_FOUND","domain":"global","reason":"invalid"}]}}`)
		case "bad":
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"code":400,"message":"INVALID_ID_TOKEN"}}`)
		case "denied":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"error":{"code":403,"message":"PERMISSION_DENIED","status":"PERMISSION_DENIED"}}`)
		case "down":
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":503,"message":"UNAVAILABLE"}}`)
		default:
			fmt.Fprint(w, `{"kind":"identitytoolkit#DeleteAccountResponse"}`)
		}
	}))
	defer srv.Close()
	a := NewAccountRecordsWith(srv.Client(), srv.URL, "p1")
	for uid, ok := range map[string]bool{"ann": true, "gone": true, "bad": false, "denied": false, "down": false} {
		if err := a.Delete(context.Background(), uid); (err == nil) != ok {
			t.Errorf("Delete(%q): %v, want success %v", uid, err, ok)
		}
	}
	if len(asked) != 5 {
		t.Errorf("accounts:delete asked for %q, want each account once", asked)
	}
}
