// /isu/:id/condition: condition history with level filter, time range and paging.
import { useEffect, useState } from 'preact/hooks';
import { api, LEVELS, type Condition, type Level } from '../api';
import { IsuFrame } from '../components/IsuFrame';
import { Empty, ErrorMessage, LevelBadge, Loading } from '../components/Status';
import { filterSearch, mayHaveOlder, olderPage, parseFilter, toQuery, type ConditionFilter } from '../conditionFilter';
import { describeConditionFlags, formatDateTime, fromDateTimeLocal, isoTime, LEVEL_LABEL, toDateTimeLocal } from '../format';
import { usePolling } from '../hooks';
import { navigate, paths, useLocation } from '../router';

export const CONDITIONS_REFRESH_MS = 5000;

export function ConditionsPage({ uuid }: { uuid: string }) {
  return (
    <IsuFrame uuid={uuid} tab="conditions">
      {(isu) => <ConditionHistory uuid={isu.jia_isu_uuid} />}
    </IsuFrame>
  );
}

function ConditionHistory({ uuid }: { uuid: string }) {
  const { search } = useLocation();
  const filter = parseFilter(search);
  const key = filterSearch(filter);
  const live = filter.end === null;
  const { data } = usePolling(
    () => (filter.levels.length === 0 ? Promise.resolve([]) : api.conditions(uuid, toQuery(filter))),
    [uuid, key],
    live ? CONDITIONS_REFRESH_MS : null,
  );
  const go = (next: ConditionFilter) => navigate(`${paths.conditions(uuid)}${filterSearch(next)}`);

  return (
    <section aria-labelledby="history-title">
      <h2 id="history-title">Condition history</h2>
      <FilterForm filter={filter} onApply={go} />
      <p class="hint" role="status">
        {live ? `Newest first, refreshed every ${CONDITIONS_REFRESH_MS / 1000} s.` : `Conditions before ${formatDateTime(filter.end!)}.`}
      </p>
      {data.state === 'loading' && <Loading what="conditions" />}
      {data.state === 'failed' && <ErrorMessage error={data.error} />}
      {data.state === 'ready' && <ConditionTable conditions={data.value} filter={filter} />}
      {data.state === 'ready' && (
        <nav class="pager" aria-label="Pages of conditions">
          {!live && (
            <button type="button" class="button" onClick={() => go({ ...filter, end: null })}>
              Newest
            </button>
          )}
          {mayHaveOlder(data.value.length) && (
            <button
              type="button"
              class="button"
              onClick={() => go(olderPage(filter, data.value[data.value.length - 1]!.timestamp))}
            >
              Older
            </button>
          )}
        </nav>
      )}
    </section>
  );
}

function ConditionTable({ conditions, filter }: { conditions: Condition[]; filter: ConditionFilter }) {
  if (conditions.length === 0) {
    const filtered = filter.levels.length < LEVELS.length || filter.start !== null || filter.end !== null;
    return filtered ? (
      <Empty title="No condition matches this filter." />
    ) : (
      <Empty title="No condition reported yet.">
        <p>The first report usually arrives a few seconds after registration; this list refreshes by itself.</p>
      </Empty>
    );
  }
  return (
    <table class="conditions">
      <caption class="visually-hidden">Conditions, newest first</caption>
      <thead>
        <tr>
          <th scope="col">Time</th>
          <th scope="col">Level</th>
          <th scope="col">Problems</th>
          <th scope="col">Sitting</th>
          <th scope="col">Message</th>
        </tr>
      </thead>
      <tbody>
        {conditions.map((c) => (
          <tr key={c.timestamp} data-level={c.condition_level} data-timestamp={c.timestamp}>
            <td>
              <time dateTime={isoTime(c.timestamp)}>{formatDateTime(c.timestamp)}</time>
            </td>
            <td>
              <LevelBadge level={c.condition_level} />
            </td>
            <td>{describeConditionFlags(c.condition)}</td>
            <td>{c.is_sitting ? 'yes' : 'no'}</td>
            <td>{c.message}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function FilterForm({ filter, onApply }: { filter: ConditionFilter; onApply: (filter: ConditionFilter) => void }) {
  const [levels, setLevels] = useState<Level[]>(filter.levels);
  const [start, setStart] = useState(filter.start === null ? '' : toDateTimeLocal(filter.start));
  const [end, setEnd] = useState(filter.end === null ? '' : toDateTimeLocal(filter.end));
  const [problem, setProblem] = useState<string | null>(null);
  useEffect(() => {
    setLevels(filter.levels);
    setStart(filter.start === null ? '' : toDateTimeLocal(filter.start));
    setEnd(filter.end === null ? '' : toDateTimeLocal(filter.end));
  }, [filterSearch(filter)]);

  const toggle = (level: Level, on: boolean) =>
    setLevels((current) => LEVELS.filter((l) => (l === level ? on : current.includes(l))));

  const onSubmit = (event: Event) => {
    event.preventDefault();
    const startTime = start ? fromDateTimeLocal(start) : null;
    const endTime = end ? fromDateTimeLocal(end) : null;
    if (levels.length === 0) return setProblem('Choose at least one level.');
    if ((start && startTime === null) || (end && endTime === null)) return setProblem('Enter complete dates and times.');
    if (startTime !== null && endTime !== null && startTime >= endTime) {
      return setProblem('“From” must be earlier than “Until”.');
    }
    setProblem(null);
    onApply({ levels, start: startTime, end: endTime });
  };

  return (
    <form class="filter" onSubmit={onSubmit} aria-label="Filter conditions">
      <fieldset>
        <legend>Levels</legend>
        {LEVELS.map((level) => (
          <label key={level} class="check">
            <input
              type="checkbox"
              name="level"
              value={level}
              checked={levels.includes(level)}
              onChange={(e) => toggle(level, e.currentTarget.checked)}
            />{' '}
            {LEVEL_LABEL[level]}
          </label>
        ))}
      </fieldset>
      <label class="field-inline">
        From <input type="datetime-local" step={1} name="start" value={start} onInput={(e) => setStart(e.currentTarget.value)} />
      </label>
      <label class="field-inline">
        Until <input type="datetime-local" step={1} name="end" value={end} onInput={(e) => setEnd(e.currentTarget.value)} />
      </label>
      <button type="submit" class="button button-primary">
        Apply
      </button>
      {problem && (
        <p class="field-problem" role="alert">
          {problem}
        </p>
      )}
    </form>
  );
}
