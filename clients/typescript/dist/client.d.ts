import { type Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";
export type { components, paths };
export type Schemas = components["schemas"];
/** The body of every error answer. */
export type ErrorBody = Schemas["Error"];
/** The error object of an error answer: code, status, message and details. */
export type ApiError = ErrorBody["error"];
/** Google's canonical status names the API answers with. */
export type ErrorStatus = ApiError["status"];
/** The details of an error (AIP-193: ErrorInfo, BadRequest, RetryInfo), as the description gives them. */
type Details = ApiError extends {
    details: readonly (infer D)[];
} ? D : never;
/** The ErrorInfo detail of an error: its reason is the cause to branch on. */
export type ErrorInfo = Extract<Details, {
    "@type": "type.googleapis.com/google.rpc.ErrorInfo";
}>;
/** The stable cause of an error (the description's ErrorReason). */
export type ErrorReason = [ErrorInfo] extends [never] ? string : ErrorInfo["reason"];
/** reasonOf is the reason of an error's ErrorInfo, or undefined when it has none. */
export declare function reasonOf(error: ApiError): ErrorReason | undefined;
/** An answer, with what a caller needs to act on it. */
export type Result<T> = {
    ok: true;
    status: number;
    data: T;
    /** The ETag of the answer (a reaction's version, a body's tag). */
    etag: string | undefined;
    /** The Session-Token of a write's answer. */
    sessionToken: string | undefined;
} | {
    ok: false;
    status: number;
    error: ApiError;
    /** The ErrorInfo's reason: the cause to branch on. */
    reason: ErrorReason | undefined;
    etag: string | undefined;
    /** Seconds, from Retry-After (429, 503), when the answer has one. */
    retryAfter: number | undefined;
};
export interface Options {
    /** The API's origin, such as https://api.example.com. */
    baseUrl: string;
    /** The caller's Firebase ID token, or undefined when signed out. */
    idToken?: () => string | undefined | Promise<string | undefined>;
    /** Retries of a 429 or 503 (default 3). */
    retries?: number;
    /** The longest Retry-After worth waiting, in seconds (default 10); a longer one is answered. */
    maxRetryAfter?: number;
    /** fetch to send requests with (default globalThis.fetch). */
    fetch?: (input: Request) => Promise<Response>;
    /** How to wait before a retry (default setTimeout). */
    sleep?: (ms: number) => Promise<void>;
}
/** retryAfter reads Retry-After in seconds; an HTTP date or nothing is undefined. */
export declare function retryAfter(res: Response): number | undefined;
/**
 * retrying wraps fetch: a 429 or 503 is sent again after its Retry-After
 * (1 s when absent), up to retries times, unless Retry-After is longer than
 * maxRetryAfter. A 429 changed nothing, so it is always sent again; a 503
 * is sent again unless the request is a POST without an Idempotency-Key
 * (whose retry could do twice what the first attempt did).
 */
export declare function retrying(send: (input: Request) => Promise<Response>, retries: number, maxRetryAfter: number, sleep: (ms: number) => Promise<void>): (input: Request) => Promise<Response>;
/** byteOrder sorts ids by byte value, each once: the canonical `ids` of GET /v1/counts. */
export declare function byteOrder(ids: readonly string[]): string[];
/** The engagement API for one caller. */
export declare class Engagement {
    /** The typed openapi-fetch client: every operation of docs/openapi.yaml. */
    readonly api: Client<paths>;
    /** The Session-Token of the latest write answered, sent on GET /v1/me/counts. */
    sessionToken: string | undefined;
    constructor(opts: Options);
    /** result turns an openapi-fetch answer into a Result. */
    static result<T>(r: {
        data?: T;
        error?: unknown;
        response: Response;
    }): Result<T>;
    /**
     * Sets the caller's reaction. With ifMatch (an ETag of an earlier answer,
     * such as `"3"`), a reaction changed since answers 412 with the current
     * version in `etag`.
     */
    setReaction(contentId: string, reaction: Schemas["ReactionKind"], ifMatch?: string): Promise<Result<Schemas["Reaction"]>>;
    /** The public counts of ids (sorted and deduplicated as the API asks). */
    counts(ids: readonly string[]): Promise<Result<{
        counts: {
            [x: string]: {
                likes: number;
                dislikes: number;
                comments: number;
                threads: number;
                replies: number;
                views: number;
                uniqueViewers: number;
            };
        };
    }>>;
    /**
     * The caller's view of the counts of ids, holding the caller's latest
     * write: read at its Session-Token, or strongly (without it) when strong,
     * as after a 412 (another device wrote).
     */
    myCounts(ids: readonly string[], opts?: {
        strong?: boolean;
    }): Promise<Result<{
        counts: {
            [x: string]: {
                likes: number;
                dislikes: number;
                comments: number;
                threads: number;
                replies: number;
                views: number;
                uniqueViewers: number;
            };
        };
        viewer: {
            reactions: {
                [x: string]: {
                    reaction: components["schemas"]["ReactionKind"];
                    version: number;
                };
            };
        };
    }>>;
    /** Posts a comment (or a reply), with an Idempotency-Key so that a retry counts once. */
    postComment(videoId: string, text: string, opts?: {
        parentId?: string;
        idempotencyKey?: string;
    }): Promise<Result<{
        id: components["schemas"]["Id"];
        videoId: components["schemas"]["Id"];
        parentId?: components["schemas"]["Id"] | undefined;
        authorId: components["schemas"]["UserId"];
        text: string;
        createTime: string;
        replyCount: number;
    }>>;
}
