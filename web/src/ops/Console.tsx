// The operator console at /ops: sign-in with the operator token, then the placement map
// (256 slots coloured by cell, pins and migrations marked, refreshed every second), the
// cells, the replicas, the migrations, firing alerts and charts from Prometheus, and the
// two actions (migrate a slot, drain a cell), each behind a confirmation.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import type { Alert, Charts, ConsoleState } from './api';
import { OpsError, opsApi } from './api';
import { OpsChart } from './OpsChart';
import {
  aligned,
  cellColour,
  DOWN_COLOUR,
  formatMillis,
  leaderChanges,
  parseSlot,
  RANGES,
  slotAfterKey,
  slotHex,
  slotLabel,
  slotViews,
} from './model';
import './ops.css';

/** How often the live state is asked for. */
const STATE_EVERY_MS = 1000;
/** How often charts and alerts are asked for. */
const PROMETHEUS_EVERY_MS = 15000;

export function Console() {
  const [csrf, setCsrf] = useState<string | null | undefined>(undefined);
  const [failure, setFailure] = useState<string | null>(null);

  useEffect(() => {
    document.title = 'Operator console — ISUCONDITION';
    opsApi.session().then(setCsrf, (error: unknown) => {
      setCsrf(null);
      setFailure(String(error instanceof Error ? error.message : error));
    });
  }, []);

  const signOut = useCallback(async () => {
    if (csrf) await opsApi.signOut(csrf).catch(() => undefined);
    setCsrf(null);
  }, [csrf]);

  return (
    <>
      <a class="skip-link" href="#main">
        Skip to content
      </a>
      <header class="site-header ops-header">
        <span class="brand">ISUCONDITION operator console</span>
        {csrf && (
          <button type="button" class="button button-small" onClick={signOut}>
            Sign out
          </button>
        )}
      </header>
      <main id="main" class="main ops-main">
        {failure && (
          <p class="status status-error" role="alert">
            {failure}
          </p>
        )}
        {csrf === undefined && (
          <p class="status" role="status">
            Loading…
          </p>
        )}
        {csrf === null && <SignIn onSignedIn={setCsrf} />}
        {csrf && <Dashboard csrf={csrf} onSignedOut={() => setCsrf(null)} />}
      </main>
    </>
  );
}

function SignIn({ onSignedIn }: { onSignedIn: (csrf: string) => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      onSignedIn((await opsApi.signIn(token)).csrf);
    } catch (failure) {
      setError(failure instanceof OpsError ? failure.message : String(failure));
    } finally {
      setBusy(false);
    }
  };
  return (
    <section class="narrow hero">
      <h1>Operator sign-in</h1>
      <p>
        The console is for the cluster's operators. Sign in with the operator token (<code>RUN_DIR/ops-token</code>{' '}
        of <code>scripts/cluster up</code>); it is not the cluster secret.
      </p>
      <form class="ops-signin" onSubmit={submit}>
        <label for="ops-token">Operator token</label>
        <input
          id="ops-token"
          name="token"
          type="password"
          autocomplete="current-password"
          required
          value={token}
          onInput={(event) => setToken((event.target as HTMLInputElement).value)}
        />
        <button type="submit" class="button button-primary" disabled={busy}>
          Sign in
        </button>
      </form>
      {error && (
        <p class="status status-error" role="alert">
          {error}
        </p>
      )}
    </section>
  );
}

/** Polls `load` every `everyMs` while the page is visible, one request at a time. */
function usePoll<T>(load: (() => Promise<T>) | null, everyMs: number, onError: (error: unknown) => void) {
  const [value, setValue] = useState<T | null>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!load) return;
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      if (!document.hidden) {
        try {
          const next = await load();
          if (!stopped) setValue(next);
        } catch (error) {
          if (!stopped) onError(error);
        }
      }
      if (!stopped) timer = setTimeout(run, everyMs);
    };
    void run();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [load, everyMs, tick]);
  return { value, refresh: () => setTick((t) => t + 1) };
}

function Dashboard({ csrf, onSignedOut }: { csrf: string; onSignedOut: () => void }) {
  const [error, setError] = useState<string | null>(null);
  const onError = useCallback(
    (failure: unknown) => {
      if (failure instanceof OpsError && failure.status === 401) onSignedOut();
      else setError(failure instanceof Error ? failure.message : String(failure));
    },
    [onSignedOut],
  );
  const loadState = useCallback(async () => {
    const state = await opsApi.state();
    setError(null);
    return state;
  }, []);
  const { value: state, refresh } = usePoll(loadState, STATE_EVERY_MS, onError);
  const [selected, setSelected] = useState('');

  if (!state) {
    return (
      <p class="status" role="status">
        {error ?? 'Loading the cluster’s state…'}
      </p>
    );
  }
  return (
    <>
      <h1>Cluster</h1>
      {error && (
        <p class="status status-error" role="alert">
          {error}
        </p>
      )}
      <div class="ops-top">
        <PlacementGrid state={state} picked={parseSlot(selected)} onPick={(slot) => setSelected(slotHex(slot))} />
        <div class="ops-side">
          <Cells state={state} />
          <Actions state={state} csrf={csrf} slot={selected} onSlot={setSelected} onDone={refresh} />
        </div>
      </div>
      <Alerts state={state} onError={onError} />
      <ChartsPanel state={state} onError={onError} />
      <Replicas state={state} />
      <Migrations state={state} />
    </>
  );
}

/**
 * The map as a keyboard grid: one slot in the tab order at a time (roving tabindex, the
 * slot last moved to); the arrows, Home/End (with Ctrl: first and last slot) and
 * PageUp/PageDown move between slots, Enter or Space picks one for a migration, as a click
 * does. Each slot is named by its label (slot, cell, down, migrating, pins).
 */
function PlacementGrid({
  state,
  picked,
  onPick,
}: {
  state: ConsoleState;
  picked: number | null;
  onPick: (slot: number) => void;
}) {
  const views = slotViews(state);
  const rows = Array.from({ length: 16 }, (_, row) => views.slice(row * 16, row * 16 + 16));
  const hex = Array.from({ length: 16 }, (_, i) => i.toString(16));
  const [active, setActive] = useState(0);
  const table = useRef<HTMLTableElement>(null);
  const onKeyDown = (event: KeyboardEvent) => {
    if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      onPick(active);
      return;
    }
    const next = slotAfterKey(active, event.key, event.ctrlKey || event.metaKey);
    if (next === null) return;
    event.preventDefault();
    setActive(next);
    table.current?.querySelector<HTMLElement>(`td[data-slot="${slotHex(next)}"]`)?.focus();
  };
  return (
    <section class="ops-panel" aria-labelledby="map-title">
      <h2 id="map-title">
        Placement map <span class="hint">version {state.map_version}</span>
      </h2>
      <table
        ref={table}
        class="slot-grid"
        role="grid"
        aria-labelledby="map-title"
        aria-describedby="map-keys"
        data-map-version={state.map_version}
        onKeyDown={onKeyDown}
      >
        <caption class="visually-hidden">
          The 256 slots (row: a UUID's first hex digit, column: its second) and the cell owning each
        </caption>
        <thead>
          <tr>
            <td />
            {hex.map((digit) => (
              <th scope="col" key={digit}>
                {digit}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((row, r) => (
            <tr key={r}>
              <th scope="row">{hex[r]}_</th>
              {row.map((view) => (
                <td
                  key={view.slot}
                  class={`slot${view.down ? ' slot-down' : ''}${view.migrating ? ' slot-migrating' : ''}`}
                  style={{ background: view.down ? DOWN_COLOUR : cellColour(view.cell) }}
                  data-slot={slotHex(view.slot)}
                  data-cell={view.name}
                  data-migrating={view.migrating ? 'true' : undefined}
                  tabIndex={view.slot === active ? 0 : -1}
                  aria-label={slotLabel(view)}
                  aria-selected={view.slot === picked}
                  title={slotLabel(view)}
                  onClick={() => {
                    setActive(view.slot);
                    onPick(view.slot);
                  }}
                >
                  {view.name}
                  {view.pinned > 0 && <span class="pin-mark">•</span>}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
      <p class="hint" id="map-keys">
        Dashed outline: a slot in migration. •: the slot has ISUs pinned to another cell. Red: its cell is down. Click a
        slot, or move to it with the arrow keys and press Enter, to pick it for a migration.
      </p>
    </section>
  );
}

function Cells({ state }: { state: ConsoleState }) {
  return (
    <section class="ops-panel" aria-labelledby="cells-title">
      <h2 id="cells-title">Cells</h2>
      <ul class="cell-list">
        {state.cells.map((cell, index) => (
          <li key={cell.name} class={`cell-card${cell.up ? '' : ' cell-down'}`} data-cell={cell.name} data-up={cell.up}>
            <span class="cell-swatch" style={{ background: cell.up ? cellColour(index) : DOWN_COLOUR }} aria-hidden="true" />
            <strong>{cell.name}</strong> {cell.up ? 'up' : 'DOWN'} · {cell.slots} slots · {cell.pins} pins
            {cell.map_version !== null && cell.map_version !== state.map_version && (
              <span class="hint"> · map v{cell.map_version}</span>
            )}
          </li>
        ))}
      </ul>
    </section>
  );
}

type Pending = { kind: 'migrate'; slot: string; to: string; from: string } | { kind: 'drain'; cell: string };

function Actions({
  state,
  csrf,
  slot,
  onSlot,
  onDone,
}: {
  state: ConsoleState;
  csrf: string;
  slot: string;
  onSlot: (slot: string) => void;
  onDone: () => void;
}) {
  const names = state.cells.map((cell) => cell.name);
  const [to, setTo] = useState(names[0] ?? '');
  const [drainCell, setDrainCell] = useState(names[0] ?? '');
  const [pending, setPending] = useState<Pending | null>(null);
  const [running, setRunning] = useState(false);
  const [outcome, setOutcome] = useState<{ ok: boolean; text: string } | null>(null);
  const dialog = useRef<HTMLDialogElement>(null);

  useEffect(() => {
    if (pending) dialog.current?.showModal?.();
    else dialog.current?.close?.();
  }, [pending]);

  const askMigrate = (event: Event) => {
    event.preventDefault();
    const number = parseSlot(slot);
    if (number === null) {
      setOutcome({ ok: false, text: 'A slot is two hex digits, 00 to ff.' });
      return;
    }
    const from = names[state.slots[number] ?? 0] ?? '?';
    setPending({ kind: 'migrate', slot: slotHex(number), to, from });
  };
  const askDrain = (event: Event) => {
    event.preventDefault();
    setPending({ kind: 'drain', cell: drainCell });
  };
  const confirm = async () => {
    if (!pending) return;
    const action = pending;
    setPending(null);
    setRunning(true);
    setOutcome({ ok: true, text: action.kind === 'migrate' ? `Migrating slot ${action.slot}…` : `Draining cell ${action.cell}…` });
    try {
      const answer =
        action.kind === 'migrate'
          ? await opsApi.migrate(csrf, action.slot, action.to)
          : await opsApi.drain(csrf, action.cell);
      const moved = answer.migrations.map((m) => `${m.subject} ${m.from}→${m.to} in ${formatMillis(m.millis)}`);
      setOutcome({ ok: true, text: moved.length ? `Done: ${moved.join('; ')}.` : 'Nothing to move.' });
    } catch (failure) {
      setOutcome({ ok: false, text: failure instanceof Error ? failure.message : String(failure) });
    } finally {
      setRunning(false);
      onDone();
    }
  };

  return (
    <section class="ops-panel" aria-labelledby="actions-title">
      <h2 id="actions-title">Actions</h2>
      <form class="ops-form" onSubmit={askMigrate}>
        <label for="migrate-slot">Slot</label>
        <input
          id="migrate-slot"
          size={4}
          value={slot}
          placeholder="0b"
          onInput={(event) => onSlot((event.target as HTMLInputElement).value)}
        />
        <label for="migrate-to">to cell</label>
        <select id="migrate-to" value={to} onChange={(event) => setTo((event.target as HTMLSelectElement).value)}>
          {names.map((name) => (
            <option key={name}>{name}</option>
          ))}
        </select>
        <button type="submit" class="button button-small" disabled={running}>
          Migrate…
        </button>
      </form>
      <form class="ops-form" onSubmit={askDrain}>
        <label for="drain-cell">Drain cell</label>
        <select
          id="drain-cell"
          value={drainCell}
          onChange={(event) => setDrainCell((event.target as HTMLSelectElement).value)}
        >
          {names.map((name) => (
            <option key={name}>{name}</option>
          ))}
        </select>
        <button type="submit" class="button button-small" disabled={running}>
          Drain…
        </button>
      </form>
      {outcome && (
        <p class={outcome.ok ? 'status' : 'status status-error'} role="status" data-testid="action-outcome">
          {outcome.text}
        </p>
      )}
      <dialog ref={dialog} class="ops-dialog" aria-labelledby="confirm-title" onClose={() => setPending(null)}>
        <h2 id="confirm-title">Please confirm</h2>
        <p>
          {pending?.kind === 'migrate' &&
            `Move slot ${pending.slot} from cell ${pending.from} to cell ${pending.to}? Its ISUs keep working; the map flips once the copy caught up.`}
          {pending?.kind === 'drain' &&
            `Move every slot and pin of cell ${pending.cell} to the other cells? This runs one live migration per slot.`}
        </p>
        <div class="ops-dialog-buttons">
          <button type="button" class="button" onClick={() => setPending(null)}>
            Cancel
          </button>
          <button type="button" class="button button-primary" onClick={confirm}>
            {pending?.kind === 'drain' ? 'Drain' : 'Migrate'}
          </button>
        </div>
      </dialog>
    </section>
  );
}

function Head({ columns }: { columns: string[] }) {
  return (
    <thead>
      <tr>
        {columns.map((column) => (
          <th scope="col" key={column}>
            {column}
          </th>
        ))}
      </tr>
    </thead>
  );
}

function Replicas({ state }: { state: ConsoleState }) {
  return (
    <section class="ops-panel" aria-labelledby="replicas-title">
      <h2 id="replicas-title">Coordinator replicas</h2>
      <div class="table-scroll" tabIndex={0} role="region" aria-label="Replicas table">
        <table class="ops-table">
          <Head columns={['Replica', 'Role', 'Term', 'Applied', 'Lag', 'Ready']} />
          <tbody>
            {state.replicas.map((replica) => (
              <tr key={replica.id} data-role={replica.status?.role ?? 'unreachable'}>
                <td>
                  {replica.id} {replica.id === state.served_by && <span class="hint">(this one)</span>}
                </td>
                <td>{replica.status?.role ?? 'does not answer'}</td>
                <td>{replica.status?.term ?? '—'}</td>
                <td>{replica.status?.applied_index ?? '—'}</td>
                <td>{replica.lag ?? '—'}</td>
                <td>{replica.status ? (replica.status.ready ? 'yes' : 'no') : '—'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

function Migrations({ state }: { state: ConsoleState }) {
  const rows = [...state.in_flight, ...state.recent];
  return (
    <section class="ops-panel" aria-labelledby="migrations-title">
      <h2 id="migrations-title">Migrations</h2>
      {rows.length === 0 ? (
        <p class="hint">None in flight, none among the steps this replica has applied.</p>
      ) : (
        <div class="table-scroll" tabIndex={0} role="region" aria-label="Migrations table">
          <table class="ops-table migrations">
            <Head columns={['Id', 'Subject', 'Cells', 'Outcome', 'Duration', 'Steps']} />
            <tbody>
              {rows.map((migration) => {
                const first = migration.steps[0]?.at_ms ?? 0;
                return (
                  <tr key={migration.id} data-subject={migration.subject} data-outcome={migration.outcome}>
                    <td>{migration.id}</td>
                    <td>{migration.subject}</td>
                    <td>
                      {migration.from} → {migration.to}
                    </td>
                    <td>{migration.outcome}</td>
                    <td>{formatMillis(migration.millis)}</td>
                    <td>{migration.steps.map((step) => `${step.phase} +${formatMillis(step.at_ms - first)}`).join(', ')}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

const NO_PROMETHEUS = (
  <p class="notice notice-info ops-notice">
    Charts and alerts need Prometheus: start the cluster with <code>scripts/cluster up --prometheus</code> (the
    coordinator's <code>--prometheus-url</code>).
  </p>
);

function Alerts({ state, onError }: { state: ConsoleState; onError: (error: unknown) => void }) {
  const load = useCallback(() => opsApi.alerts(), []);
  const { value } = usePoll(state.prometheus ? load : null, 5000, onError);
  const alerts: Alert[] = value?.alerts ?? [];
  return (
    <section class="ops-panel" aria-labelledby="alerts-title">
      <h2 id="alerts-title">Alerts</h2>
      {!state.prometheus ? (
        NO_PROMETHEUS
      ) : alerts.length === 0 ? (
        <p class="hint">{value ? 'Nothing firing.' : 'Asking Prometheus…'}</p>
      ) : (
        <ul class="alert-list">
          {alerts.map((alert) => (
            <li key={`${alert.name}/${alert.cell}`} class={`alert alert-${alert.state}`} data-alert={alert.name} data-cell={alert.cell ?? ''}>
              <strong>{alert.name}</strong> {alert.state}
              {alert.cell && ` · cell ${alert.cell}`}
              {alert.severity && ` · ${alert.severity}`}
              {alert.summary && <span class="hint"> — {alert.summary}</span>}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

const CHARTS: { name: 'requests' | 'errors' | 'p99' | 'budget'; title: string; unit: string; scale: number }[] = [
  { name: 'requests', title: 'Requests a second', unit: 'req/s', scale: 1 },
  { name: 'errors', title: 'Error ratio (5xx)', unit: '%', scale: 100 },
  { name: 'p99', title: 'p99 latency', unit: 'ms', scale: 1000 },
  { name: 'budget', title: 'Error budget left (1 h)', unit: '%', scale: 100 },
];

function ChartsPanel({ state, onError }: { state: ConsoleState; onError: (error: unknown) => void }) {
  const [range, setRange] = useState(900);
  const load = useCallback(() => opsApi.charts(range), [range]);
  const { value: charts } = usePoll<Charts>(state.prometheus ? load : null, PROMETHEUS_EVERY_MS, onError);
  const names = state.cells.map((cell) => cell.name).concat('coordinator');
  return (
    <section class="ops-panel" aria-labelledby="charts-title">
      <div class="section-head">
        <h2 id="charts-title">Per cell</h2>
        {state.prometheus && (
          <label>
            Range{' '}
            <select value={range} onChange={(event) => setRange(Number((event.target as HTMLSelectElement).value))}>
              {RANGES.map(([seconds, label]) => (
                <option key={seconds} value={seconds}>
                  {label}
                </option>
              ))}
            </select>
          </label>
        )}
      </div>
      {!state.prometheus ? (
        NO_PROMETHEUS
      ) : !charts ? (
        <p class="hint">Asking Prometheus…</p>
      ) : (
        <>
          <p class="hint">Red dashed lines: a new leader (the term rose).</p>
          <div class="ops-charts">
            {CHARTS.map((chart) => (
              <OpsChart
                key={chart.name}
                title={chart.title}
                unit={chart.unit}
                chart={aligned(charts, charts.charts.find((c) => c.name === chart.name)?.series ?? [], chart.scale)}
                cellNames={names}
                leaderChanges={leaderChanges(charts)}
              />
            ))}
          </div>
        </>
      )}
    </section>
  );
}
