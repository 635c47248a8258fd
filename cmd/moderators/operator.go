package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os/user"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/videngage/engagement/shared/config"
)

// tokenInfoURL is Google's OAuth 2.0 token information endpoint: it names
// the account an access token was issued to.
const tokenInfoURL = "https://oauth2.googleapis.com/tokeninfo"

// operatorScopes are the scopes the command's credentials ask for:
// Spanner's, and the account's e-mail address for tokeninfo to name it.
var operatorScopes = []string{"https://www.googleapis.com/auth/cloud-platform", "https://www.googleapis.com/auth/userinfo.email"}

// operator is the principal the command acts as, recorded in the audit
// trail: the account of the Application Default Credentials, the identity
// the Spanner client authenticates as (and Cloud Audit Logs record), never
// a name typed on the command line. Against the emulator, which has no
// identities, it is the stand-in "local:" and the OS user's name.
func operator(ctx context.Context, cfg *config.Config) (string, error) {
	if cfg.Spanner.EmulatorHost != "" {
		name := "unknown"
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		return "local:" + name, nil
	}
	creds, err := google.FindDefaultCredentials(ctx, operatorScopes...)
	if err != nil {
		return "", fmt.Errorf("application default credentials: %w", err)
	}
	// A service account key names its account; any other credential is
	// named by the token it issues.
	var key struct {
		ClientEmail string `json:"client_email"`
	}
	if json.Unmarshal(creds.JSON, &key) == nil && key.ClientEmail != "" {
		return key.ClientEmail, nil
	}
	return tokenEmail(ctx, http.DefaultClient, tokenInfoURL, creds.TokenSource)
}

// tokenEmail asks the tokeninfo endpoint whose access token ts issues.
func tokenEmail(ctx context.Context, client *http.Client, endpoint string, ts oauth2.TokenSource) (string, error) {
	tok, err := ts.Token()
	if err != nil {
		return "", fmt.Errorf("access token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"?"+url.Values{"access_token": {tok.AccessToken}}.Encode(), nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("tokeninfo: %w", err)
	}
	defer resp.Body.Close()
	var info struct {
		Email         string `json:"email"`
		EmailVerified string `json:"email_verified"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("tokeninfo: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return "", fmt.Errorf("tokeninfo: %w", err)
	}
	if info.Email == "" || info.EmailVerified != "true" {
		return "", errors.New("tokeninfo names no verified e-mail address: sign in with `gcloud auth application-default login` (its scopes include userinfo.email)")
	}
	return info.Email, nil
}
