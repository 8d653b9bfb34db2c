/** The gallery (the list and one image's page) and its script. */
import { defineMessages } from "../defineMessages";

export const gallery = defineMessages(
  {
    "client.gallery.copyLinkPrompt": "Copy this link:",
  },
  {
    "client.gallery.copyLinkPrompt": "请复制此链接：",
  },
);
