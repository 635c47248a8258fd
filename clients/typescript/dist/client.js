// A typed client of the engagement API for frontends: the types are
// generated from docs/openapi.yaml (schema.d.ts, openapi-typescript), the
// requests are sent by openapi-fetch, and this wrapper adds what every
// caller would otherwise write by hand: the ID token, the session token of
// the latest write, If-Match from an ETag, and retries of 429 and 503 after
// their Retry-After.
import createClient from "openapi-fetch";
/** reasonOf is the reason of an error's ErrorInfo, or undefined when it has none. */
export function reasonOf(error) {
    const details = error.details;
    if (!Array.isArray(details)) {
        return undefined;
    }
    for (const d of details) {
        if (typeof d === "object" && d !== null && "@type" in d && d["@type"] === "type.googleapis.com/google.rpc.ErrorInfo" && "reason" in d) {
            return d.reason;
        }
    }
    return undefined;
}
const defaultSleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** retryAfter reads Retry-After in seconds; an HTTP date or nothing is undefined. */
export function retryAfter(res) {
    const v = res.headers.get("Retry-After");
    if (v === null || !/^[0-9]+$/.test(v.trim())) {
        return undefined;
    }
    return Number(v.trim());
}
/**
 * retrying wraps fetch: a 429 or 503 is sent again after its Retry-After
 * (1 s when absent), up to retries times, unless Retry-After is longer than
 * maxRetryAfter. A 429 changed nothing, so it is always sent again; a 503
 * is sent again unless the request is a POST without an Idempotency-Key
 * (whose retry could do twice what the first attempt did).
 */
export function retrying(send, retries, maxRetryAfter, sleep) {
    return async (input) => {
        for (let attempt = 0;; attempt++) {
            const res = await send(input.clone());
            if (res.status !== 429 && res.status !== 503) {
                return res;
            }
            if (res.status === 503 && input.method === "POST" && !input.headers.has("Idempotency-Key")) {
                return res;
            }
            const wait = retryAfter(res) ?? 1;
            if (attempt >= retries || wait > maxRetryAfter) {
                return res;
            }
            await res.body?.cancel();
            await sleep(wait * 1000);
        }
    };
}
/** byteOrder sorts ids by byte value, each once: the canonical `ids` of GET /v1/counts. */
export function byteOrder(ids) {
    const enc = new TextEncoder();
    const cmp = (a, b) => {
        const x = enc.encode(a);
        const y = enc.encode(b);
        for (let i = 0; i < Math.min(x.length, y.length); i++) {
            const d = (x[i] ?? 0) - (y[i] ?? 0);
            if (d !== 0) {
                return d;
            }
        }
        return x.length - y.length;
    };
    return [...new Set(ids)].sort(cmp);
}
/** The engagement API for one caller. */
export class Engagement {
    /** The typed openapi-fetch client: every operation of docs/openapi.yaml. */
    api;
    /** The Session-Token of the latest write answered, sent on GET /v1/me/counts. */
    sessionToken;
    constructor(opts) {
        const send = opts.fetch ?? ((input) => globalThis.fetch(input));
        this.api = createClient({
            baseUrl: opts.baseUrl,
            fetch: retrying(send, opts.retries ?? 3, opts.maxRetryAfter ?? 10, opts.sleep ?? defaultSleep),
            // The description's `ids` is one comma-separated parameter (form,
            // explode: false), not repeated.
            querySerializer: { array: { style: "form", explode: false } },
        });
        const idToken = opts.idToken;
        const auth = {
            onRequest: async ({ request }) => {
                const token = idToken ? await idToken() : undefined;
                if (token !== undefined && !request.headers.has("Authorization")) {
                    request.headers.set("Authorization", `Bearer ${token}`);
                }
                return request;
            },
            onResponse: ({ response }) => {
                const token = response.headers.get("Session-Token");
                if (response.ok && token !== null) {
                    this.sessionToken = token;
                }
                return undefined;
            },
        };
        this.api.use(auth);
    }
    /** result turns an openapi-fetch answer into a Result. */
    static result(r) {
        const etag = r.response.headers.get("ETag") ?? undefined;
        if (r.response.ok) {
            return {
                ok: true,
                status: r.response.status,
                data: r.data,
                etag,
                sessionToken: r.response.headers.get("Session-Token") ?? undefined,
            };
        }
        const error = asError(r.error, r.response);
        return { ok: false, status: r.response.status, error, reason: reasonOf(error), etag, retryAfter: retryAfter(r.response) };
    }
    /**
     * Sets the caller's reaction. With ifMatch (an ETag of an earlier answer,
     * such as `"3"`), a reaction changed since answers 412 with the current
     * version in `etag`.
     */
    async setReaction(contentId, reaction, ifMatch) {
        return Engagement.result(await this.api.PUT("/v1/reactions/{contentId}", {
            params: { path: { contentId }, header: ifMatch === undefined ? {} : { "If-Match": ifMatch } },
            body: { reaction },
        }));
    }
    /** The public counts of ids (sorted and deduplicated as the API asks). */
    async counts(ids) {
        return Engagement.result(await this.api.GET("/v1/counts", { params: { query: { ids: byteOrder(ids) } } }));
    }
    /**
     * The caller's view of the counts of ids, holding the caller's latest
     * write: read at its Session-Token, or strongly (without it) when strong,
     * as after a 412 (another device wrote).
     */
    async myCounts(ids, opts = {}) {
        const token = opts.strong ? undefined : this.sessionToken;
        return Engagement.result(await this.api.GET("/v1/me/counts", {
            params: { query: { ids: [...ids] }, header: token === undefined ? {} : { "Session-Token": token } },
        }));
    }
    /** Posts a comment (or a reply), with an Idempotency-Key so that a retry counts once. */
    async postComment(videoId, text, opts = {}) {
        const key = opts.idempotencyKey ?? globalThis.crypto.randomUUID();
        const body = { text };
        if (opts.parentId !== undefined) {
            body.parentId = opts.parentId;
        }
        return Engagement.result(await this.api.POST("/v1/videos/{videoId}/comments", {
            params: { path: { videoId }, header: { "Idempotency-Key": key } },
            body,
        }));
    }
}
/** asError is the error of an answer, or one made from its status when its body is not the API's. */
function asError(body, res) {
    if (typeof body === "object" && body !== null && "error" in body) {
        const e = body.error;
        if (typeof e === "object" && e !== null && "code" in e && "status" in e && "message" in e) {
            return e;
        }
    }
    return { code: res.status, status: res.status === 503 ? "UNAVAILABLE" : "INTERNAL", message: res.statusText || `HTTP ${res.status}` };
}
