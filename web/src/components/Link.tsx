// In-app links: ordinary <a href>, navigated without a reload.
import type { ComponentChildren } from 'preact';
import { isModifiedClick, navigate } from '../router';

interface Props {
  href: string;
  children: ComponentChildren;
  class?: string;
  'aria-current'?: 'page' | undefined;
}

/** An ordinary link that navigates without reloading the page. */
export function Link({ href, children, ...rest }: Props) {
  const onClick = (event: MouseEvent) => {
    if (isModifiedClick(event)) return;
    event.preventDefault();
    navigate(href);
  };
  return (
    <a href={href} onClick={onClick} {...rest}>
      {children}
    </a>
  );
}
