// Loading, error, empty states and the level badge, shared by every page.
import type { ComponentChildren } from 'preact';
import type { Level } from '../api';
import { describeError, type ErrorContext } from '../errors';
import { LEVEL_LABEL, LEVEL_MEANING } from '../format';

export function Loading({ what }: { what: string }) {
  return (
    <p class="status" role="status" aria-live="polite">
      Loading {what}…
    </p>
  );
}

export function ErrorMessage({ error, context }: { error: unknown; context?: ErrorContext }) {
  return (
    <p class="status status-error" role="alert">
      {describeError(error, context)}
    </p>
  );
}

export function Empty({ title, children }: { title: string; children?: ComponentChildren }) {
  return (
    <div class="empty">
      <p class="empty-title">{title}</p>
      {children}
    </div>
  );
}

export function LevelBadge({ level }: { level: Level }) {
  return (
    <span class={`badge badge-${level}`} title={LEVEL_MEANING[level]}>
      {LEVEL_LABEL[level]}
    </span>
  );
}
