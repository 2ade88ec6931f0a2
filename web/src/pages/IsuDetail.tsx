// /isu/:id: the ISU and its latest condition.
import { api } from '../api';
import { IsuFrame } from '../components/IsuFrame';
import { Link } from '../components/Link';
import { ErrorMessage, LevelBadge, Loading } from '../components/Status';
import { describeConditionFlags, formatDateTime, isoTime } from '../format';
import { usePolling } from '../hooks';
import { paths } from '../router';

export const LATEST_REFRESH_MS = 5000;

export function IsuDetailPage({ uuid }: { uuid: string }) {
  return <IsuFrame uuid={uuid} tab="isu">{(isu) => <Overview uuid={isu.jia_isu_uuid} id={isu.id} />}</IsuFrame>;
}

function Overview({ uuid, id }: { uuid: string; id: number }) {
  const { data } = usePolling(() => api.latestCondition(uuid), [uuid], LATEST_REFRESH_MS);
  return (
    <section aria-labelledby="latest-title">
      <dl class="facts">
        <dt>JIA ISU ID</dt>
        <dd>
          <code>{uuid}</code>
        </dd>
        <dt>ISU number</dt>
        <dd>{id}</dd>
      </dl>
      <h2 id="latest-title">Latest condition</h2>
      {data.state === 'loading' && <Loading what="the latest condition" />}
      {data.state === 'failed' && <ErrorMessage error={data.error} />}
      {data.state === 'ready' && data.value === null && (
        <p class="hint" role="status">
          No condition reported yet. The first report usually arrives a few seconds after registration; this page
          refreshes by itself.
        </p>
      )}
      {data.state === 'ready' && data.value !== null && (
        <div class="latest-card">
          <p>
            <LevelBadge level={data.value.condition_level} /> {describeConditionFlags(data.value.condition)},{' '}
            {data.value.is_sitting ? 'someone is sitting' : 'nobody is sitting'}
          </p>
          {data.value.message && <p class="message">“{data.value.message}”</p>}
          <p class="hint">
            Reported <time dateTime={isoTime(data.value.timestamp)}>{formatDateTime(data.value.timestamp)}</time>
          </p>
        </div>
      )}
      <p class="actions">
        <Link class="button" href={paths.conditions(uuid)}>
          See the condition history
        </Link>
        <Link class="button" href={paths.graph(uuid)}>
          See the 24-hour graph
        </Link>
      </p>
    </section>
  );
}
