/** The OpenAI error object, as the API answers it and as failed tasks carry it. */
export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}
