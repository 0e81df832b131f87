package words

// Stopword says whether w (lower-case) is an English stopword: a word too
// common to say what a text is about.
func Stopword(w string) bool {
	_, ok := stopwords[w]
	return ok
}

var stopwords = func() map[string]struct{} {
	m := map[string]struct{}{}
	for _, w := range []string{
		"a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are", "as", "at",
		"be", "because", "been", "before", "being", "below", "between", "both", "but", "by",
		"can", "cannot", "could", "did", "do", "does", "doing", "done", "down", "during",
		"each", "either", "else", "etc", "even", "ever", "every", "few", "for", "from", "further",
		"get", "gets", "got", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "however",
		"i", "if", "in", "into", "is", "it", "its", "itself", "just", "least", "less", "let", "like", "made", "make", "makes", "many", "may", "me", "might",
		"more", "most", "much", "must", "my", "myself", "neither", "no", "nor", "not", "now", "of", "off", "often", "on", "once", "one", "only", "or",
		"other", "others", "otherwise", "ought", "our", "ours", "ourselves", "out", "over", "own",
		"per", "perhaps", "quite", "rather", "re", "really", "s", "same", "say", "says", "see", "seen", "shall", "she", "should", "since", "so", "some", "such",
		"t", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "though", "through", "thus", "to", "too",
		"under", "until", "up", "upon", "us", "use", "used", "uses", "using", "very", "via",
		"was", "way", "we", "well", "were", "what", "whatever", "when", "where", "whether", "which", "while", "who", "whom", "whose", "why", "will", "with", "within", "without", "would",
		"yet", "you", "your", "yours", "yourself", "yourselves",
		"d", "ll", "m", "ve", "don", "doesn", "didn", "isn", "aren", "wasn", "weren", "won", "wouldn", "shouldn", "couldn", "hasn", "haven", "hadn",
		"two", "three", "first", "new", "know", "need", "needs", "want", "take", "takes", "put", "keep", "keeps", "still", "already", "always", "never", "usually",
	} {
		m[w] = struct{}{}
	}
	return m
}()
