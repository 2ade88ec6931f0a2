// Typed client of the operator console's API (/ops/api/*, the coordinator's
// coordinator/src/routes/ops). Signed in by the operator token; every action carries
// the session's CSRF token in x-ops-csrf.

export interface CellRow {
  name: string;
  up: boolean;
  slots: number;
  pins: number;
  map_version: number | null;
}

export interface Step {
  phase: string;
  at_ms: number;
}

export interface SeenMigration {
  id: number;
  subject: string;
  slot: number;
  pin: boolean;
  from: string;
  to: string;
  steps: Step[];
  outcome: 'in flight' | 'done' | 'rolled back';
  millis: number;
}

export interface ReplicaStatus {
  id: number;
  role: string;
  term: number;
  leader: number | null;
  last_log_index: number;
  applied_index: number;
  members: number[];
  ready: boolean;
  state_hash: string;
}

export interface ReplicaRow {
  id: number;
  url: string;
  status: ReplicaStatus | null;
  lag: number | null;
}

export interface ConsoleState {
  map_version: number;
  cells: CellRow[];
  /** The owner (an index into `cells`) of each of the 256 slots. */
  slots: number[];
  pins: { isu: string; cell: number }[];
  in_flight: SeenMigration[];
  recent: SeenMigration[];
  replicas: ReplicaRow[];
  served_by: number;
  prometheus: boolean;
}

export interface Series {
  cell: string;
  points: [number, number][];
}

export interface Charts {
  start: number;
  end: number;
  step: number;
  charts: { name: 'requests' | 'errors' | 'p99' | 'budget' | 'term'; series: Series[] }[];
}

export interface Alert {
  name: string;
  state: string;
  cell: string | null;
  severity: string | null;
  summary: string | null;
  active_at: string | null;
}

export interface MigrationReport {
  id: number;
  subject: string;
  from: string;
  to: string;
  isus: number;
  conditions: number;
  millis: number;
  map_version: number;
}

export interface CellsAnswer {
  error?: string;
  migrations: MigrationReport[];
  map_version?: number;
}

/** A non-2xx answer with the server's `error`. */
export class OpsError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'OpsError';
  }
}

async function call<T>(method: string, path: string, csrf?: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (csrf) headers['x-ops-csrf'] = csrf;
  const response = await fetch(`/ops/api/${path}`, {
    method,
    credentials: 'same-origin',
    headers,
    body: body === undefined ? null : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) {
    const message = (parsed as { error?: string } | null)?.error ?? (text.trim() || `HTTP ${response.status}`);
    throw new OpsError(response.status, message);
  }
  return parsed as T;
}

export const opsApi = {
  signIn: (token: string) => call<{ csrf: string }>('POST', 'signin', undefined, { token }),
  /** The CSRF token while signed in; null when not (401). */
  async session(): Promise<string | null> {
    try {
      return (await call<{ csrf: string }>('GET', 'session')).csrf;
    } catch (error) {
      if (error instanceof OpsError && error.status === 401) return null;
      throw error;
    }
  },
  signOut: (csrf: string) => call<null>('POST', 'signout', csrf, {}),
  state: () => call<ConsoleState>('GET', 'state'),
  charts: (rangeSeconds: number) => call<Charts>('GET', `charts?range=${rangeSeconds}`),
  alerts: () => call<{ alerts: Alert[] }>('GET', 'alerts'),
  migrate: (csrf: string, slot: string, to: string) => call<CellsAnswer>('POST', 'migrate', csrf, { slot, to }),
  drain: (csrf: string, cell: string) => call<CellsAnswer>('POST', 'drain', csrf, { cell }),
};
