// Heading and tabs shared by the three pages of one ISU.
import type { ComponentChildren } from 'preact';
import { api, ApiError, type Isu } from '../api';
import { usePolling, useTitle } from '../hooks';
import { paths } from '../router';
import { Link } from './Link';
import { Empty, ErrorMessage, Loading } from './Status';

type Tab = 'isu' | 'conditions' | 'graph';

const TABS: { tab: Tab; label: string; href: (uuid: string) => string }[] = [
  { tab: 'isu', label: 'Overview', href: paths.isu },
  { tab: 'conditions', label: 'Condition history', href: paths.conditions },
  { tab: 'graph', label: 'Graph', href: paths.graph },
];

/** Loads the ISU, then renders its heading, tabs and `children(isu)`. */
export function IsuFrame({ uuid, tab, children }: { uuid: string; tab: Tab; children: (isu: Isu) => ComponentChildren }) {
  const { data } = usePolling(() => api.getIsu(uuid), [uuid], null);
  const tabLabel = TABS.find((t) => t.tab === tab)!.label;
  useTitle(data.state === 'ready' ? `${data.value.name} · ${tabLabel}` : tabLabel);
  if (data.state === 'loading') return <Loading what="the ISU" />;
  if (data.state === 'failed') {
    if (data.error instanceof ApiError && data.error.status === 404) {
      return (
        <Empty title="ISU not found">
          <p>There is no ISU with the ID {uuid} among yours.</p>
          <p>
            <Link href={paths.top()}>Back to your ISUs</Link>
          </p>
        </Empty>
      );
    }
    return <ErrorMessage error={data.error} />;
  }
  const isu = data.value;
  return (
    <>
      <header class="isu-head">
        <img class="isu-icon isu-icon-large" src={api.iconUrl(isu.jia_isu_uuid)} alt="" width={96} height={96} />
        <div>
          <h1>{isu.name}</h1>
          <p class="isu-character">{isu.character}</p>
        </div>
      </header>
      <nav class="tabs" aria-label="ISU pages">
        {TABS.map((t) => (
          <Link
            key={t.tab}
            href={t.href(isu.jia_isu_uuid)}
            class={t.tab === tab ? 'tab tab-current' : 'tab'}
            aria-current={t.tab === tab ? 'page' : undefined}
          >
            {t.label}
          </Link>
        ))}
      </nav>
      {children(isu)}
    </>
  );
}
