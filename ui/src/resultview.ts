// What a job produced and where it lives, as the job view shows them (contract §6): the
// result's text, its links (web links only), its first image (https only: the page's CSP allows
// images from https and this origin), and the job's page on the provider's site.

import type { Job } from "./generated/Job";

export interface ResultLink {
  label: string;
  url: string;
}

export interface ResultView {
  text: string | null;
  /** The result's URLs, then the provider's page, each a web link. */
  links: ResultLink[];
  /** The image to show inline (https only), or null. */
  image: string | null;
}

/** Whether a URL is a web link the page may point to (http or https). */
export function isWebLink(url: string): boolean {
  try {
    const u = new URL(url);
    return (u.protocol === "https:" || u.protocol === "http:") && u.hostname !== "";
  } catch {
    return false;
  }
}

/** The last segment of a URL's path, to name a link ("out-0.webp"), else its host. */
function linkName(url: string): string {
  const u = new URL(url);
  const last = u.pathname.split("/").filter((s) => s !== "").pop();
  return last ? decodeURIComponent(last) : u.hostname;
}

/** What the job view shows of a job's result and links; null when there is nothing to show. */
export function resultView(job: Pick<Job, "result" | "provider_url" | "provider">): ResultView | null {
  const links: ResultLink[] = [];
  const result = job.result;
  for (const url of result?.urls ?? []) {
    if (isWebLink(url)) links.push({ label: `Open ${linkName(url)}`, url });
  }
  if (result?.image && isWebLink(result.image) && !links.some((l) => l.url === result.image)) {
    links.unshift({ label: "Open image", url: result.image });
  }
  if (job.provider_url && isWebLink(job.provider_url)) links.push({ label: `Open on ${job.provider}`, url: job.provider_url });
  const image = result?.image && result.image.startsWith("https://") && isWebLink(result.image) ? result.image : null;
  const text = result?.text?.trim() ? result.text : null;
  if (!text && links.length === 0 && !image) return null;
  return { text, links, image };
}
