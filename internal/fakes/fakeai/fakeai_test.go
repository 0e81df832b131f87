package fakeai_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
)

func post(t *testing.T, fake *fakeai.Server, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fake.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+fake.Key)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, b
}

func TestMalformedRequestsAre400(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{MaxDimensions: 64})
	for _, tc := range []struct{ path, body string }{
		{"/embeddings", `not json`},
		{"/embeddings", `{"input": "x"}`},
		{"/embeddings", `{"model": "m", "input": []}`},
		{"/embeddings", `{"model": "m", "input": ["a", ""]}`},
		{"/embeddings", `{"model": "m", "input": [1, 2]}`},
		{"/embeddings", `{"model": "m", "input": "a", "dimensions": 65}`},
		{"/embeddings", `{"model": "m", "input": "a", "encoding_format": "int8"}`},
		{"/chat/completions", `{"model": "m", "messages": []}`},
		{"/chat/completions", `{"messages": [{"role": "user", "content": "hi"}]}`},
		{"/chat/completions", `{"model": "m", "messages": [{"role": "user", "content": 5}]}`},
	} {
		status, _ := post(t, fake, tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, status, tc.body)
	}
	require.Equal(t, 10, fake.Counts().BadRequest)
	require.Empty(t, fake.Requests())

	status, _ := post(t, fake, "/models", `{}`)
	require.Equal(t, http.StatusNotFound, status)
}

func TestEmbeddingsAsBase64(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{})
	status, body := post(t, fake, "/embeddings", `{"model": "m", "input": "hello", "dimensions": 8, "encoding_format": "base64"}`)
	require.Equal(t, http.StatusOK, status)
	var answer struct {
		Data []struct {
			Index     int    `json:"index"`
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &answer))
	raw, err := base64.StdEncoding.DecodeString(answer.Data[0].Embedding)
	require.NoError(t, err)
	got := make([]float32, len(raw)/4)
	for i := range got {
		got[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	require.Equal(t, fakeai.VectorFor("m", "hello", 8), got)
}

func TestVectorsAndTags(t *testing.T) {
	t.Parallel()
	v := fakeai.VectorFor("m", "text", 100)
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	require.InDelta(t, 1, norm, 1e-5)
	require.Equal(t, v, fakeai.VectorFor("m", "text", 100))
	require.NotEqual(t, v, fakeai.VectorFor("m2", "text", 100))

	require.Equal(t, []string{"honey", "bees", "hive"}, fakeai.TagsFor("Honey bees make honey in a hive; bees, honey, the hive and wax."))
	require.Equal(t, []string{"untagged"}, fakeai.TagsFor("a b c"))
}

func TestChatAnswersTheTaggingProtocol(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{Reply: "hello"})
	status, body := post(t, fake, "/chat/completions", `{"model": "m", "response_format": {"type": "json_object"}, "messages": [
		{"role": "system", "content": "tag"},
		{"role": "user", "content": [{"type": "text", "text": "{\"texts\": [\"honey bees honey\", \"lava lava flows\"]}"}]}]}`)
	require.Equal(t, http.StatusOK, status)
	var answer struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(body, &answer))
	require.JSONEq(t, `{"tags": [["honey", "bees"], ["lava", "flows"]]}`, answer.Choices[0].Message.Content)

	_, body = post(t, fake, "/chat/completions", `{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`)
	require.NoError(t, json.Unmarshal(body, &answer))
	require.Equal(t, "hello", answer.Choices[0].Message.Content)

	reqs := fake.Requests()
	require.Len(t, reqs, 2)
	require.Equal(t, "json_object", reqs[0].ResponseFormat)
	require.Equal(t, []fakeai.Message{{Role: "system", Content: "tag"}, {Role: "user", Content: `{"texts": ["honey bees honey", "lava lava flows"]}`}}, reqs[0].Messages)
	require.Equal(t, 2, fake.Counts().OK)
}
