// Typed client of the ISUCONDITION public API (same origin, session cookie).
// Every time that crosses the API is in unix seconds.

export const LEVELS = ['info', 'warning', 'critical'] as const;
export type Level = (typeof LEVELS)[number];

export interface Condition {
  jia_isu_uuid: string;
  isu_name: string;
  timestamp: number;
  is_sitting: boolean;
  condition: string;
  condition_level: Level;
  message: string;
}

export interface Isu {
  id: number;
  jia_isu_uuid: string;
  name: string;
  character: string;
}

export interface IsuWithLatest extends Isu {
  latest_isu_condition: Condition | null;
}

export interface GraphData {
  score: number;
  percentage: { sitting: number; is_broken: number; is_dirty: number; is_overweight: number };
}

export interface GraphPoint {
  start_at: number;
  end_at: number;
  data: GraphData | null;
  condition_timestamps: number[];
}

export interface TrendIsu {
  isu_id: number;
  timestamp: number;
}

export interface TrendEntry {
  character: string;
  info: TrendIsu[];
  warning: TrendIsu[];
  critical: TrendIsu[];
}

/** A non-2xx answer: its status and the server's plain-text message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`HTTP ${status}${body ? `: ${body}` : ''}`);
    this.name = 'ApiError';
  }
}

/** Upper bound for `end_time` when the newest conditions are wanted. Condition
 * timestamps follow JIA's (virtual) clock, never the browser's, so "now" is unknown. */
export const FAR_FUTURE = 253402300799; // 9999-12-31T23:59:59Z

type UnauthorizedHandler = () => void;
let onUnauthorized: UnauthorizedHandler = () => {};

/** Called when any session-protected call answers 401 (the app then signs the user out). */
export function setUnauthorizedHandler(handler: UnauthorizedHandler): void {
  onUnauthorized = handler;
}

interface RequestOptions {
  body?: BodyInit;
  headers?: Record<string, string>;
  /** Do not call the unauthorized handler on 401 (the caller expects it). */
  quiet401?: boolean;
}

async function request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
  const response = await fetch(path, {
    method,
    credentials: 'same-origin',
    headers: { Accept: 'application/json', ...options.headers },
    body: options.body ?? null,
  });
  if (!response.ok) {
    const body = await response.text().catch(() => '');
    if (response.status === 401 && !options.quiet401) onUnauthorized();
    throw new ApiError(response.status, body.trim());
  }
  return response;
}

async function json<T>(method: string, path: string, options?: RequestOptions): Promise<T> {
  const response = await request(method, path, options);
  return (await response.json()) as T;
}

const isuPath = (uuid: string) => `/api/isu/${encodeURIComponent(uuid)}`;

export interface ConditionQuery {
  endTime: number;
  levels: readonly Level[];
  startTime?: number | undefined;
}

/** Query string of `GET /api/condition/:uuid` (end_time exclusive, start_time inclusive). */
export function conditionSearch(query: ConditionQuery): string {
  const params = new URLSearchParams();
  params.set('end_time', String(query.endTime));
  params.set('condition_level', query.levels.join(','));
  if (query.startTime !== undefined) params.set('start_time', String(query.startTime));
  return params.toString();
}

export const api = {
  /** Exchanges JIA's sign-in token for a session cookie. */
  async auth(jwt: string): Promise<void> {
    await request('POST', '/api/auth', { headers: { Authorization: `Bearer ${jwt}` }, quiet401: true });
  },
  async signOut(): Promise<void> {
    await request('POST', '/api/signout', { quiet401: true });
  },
  /** The signed-in user's id, or null when there is no session. */
  async me(): Promise<string | null> {
    try {
      const me = await json<{ jia_user_id: string }>('GET', '/api/user/me', { quiet401: true });
      return me.jia_user_id;
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return null;
      throw error;
    }
  },
  listIsus: () => json<IsuWithLatest[]>('GET', '/api/isu'),
  getIsu: (uuid: string) => json<Isu>('GET', isuPath(uuid)),
  iconUrl: (uuid: string) => `${isuPath(uuid)}/icon`,
  registerIsu(uuid: string, name: string, image: File | null): Promise<Isu> {
    const form = new FormData();
    form.set('jia_isu_uuid', uuid);
    form.set('isu_name', name);
    if (image) form.set('image', image, image.name || 'image');
    return json<Isu>('POST', '/api/isu', { body: form });
  },
  conditions: (uuid: string, query: ConditionQuery) =>
    json<Condition[]>('GET', `/api/condition/${encodeURIComponent(uuid)}?${conditionSearch(query)}`),
  /** The newest condition of an ISU, or null when it has none yet. */
  async latestCondition(uuid: string): Promise<Condition | null> {
    const newest = await api.conditions(uuid, { endTime: FAR_FUTURE, levels: LEVELS });
    return newest[0] ?? null;
  },
  graph: (uuid: string, datetime: number) =>
    json<GraphPoint[]>('GET', `${isuPath(uuid)}/graph?datetime=${datetime}`),
  trend: () => json<TrendEntry[]>('GET', '/api/trend'),
};
